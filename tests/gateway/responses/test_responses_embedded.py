"""``/v1/responses`` with the official ``openai`` SDK on the embedded default (SmolLM2-135M
on llama.cpp, grammar-constrained tools and structured outputs): create, stream, a
two-turn conversation, a function-tool round trip, ``responses.parse`` with a Pydantic
model. The model is tiny: the assertions are on shape and schema validity, never on
answer quality."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from tiergate_testing.configs import TEST_KEY, smollm2_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow

# Enum-bounded only: the grammar enforces enums and types, not numeric ranges.
WEATHER: Any = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather forecast for a city",
    "parameters": WEATHER,
    "strict": True,
}
ASK = "What is the weather in Paris for the next 3 days?"


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    gateway: RunningGateway
    with running_gateway(smollm2_config(replicas=1)) as gateway:
        yield openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def test_create_and_continue(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="small",
        instructions="Answer in one sentence.",
        input="Name a colour.",
        max_output_tokens=12,
    )
    assert first.model == "smollm2-135m-instruct" and first.output_text
    assert first.usage is not None and first.usage.input_tokens > 10
    assert first.status in {"completed", "incomplete"}
    second = client.responses.create(
        model="small",
        input="And another one?",
        previous_response_id=first.id,
        max_output_tokens=12,
    )
    assert second.output_text
    # The continued conversation reached the model: its prompt is longer than the question.
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens


def test_stream(client: openai.OpenAI) -> None:
    with client.responses.stream(
        model="small", input="Count to five.", max_output_tokens=16
    ) as stream:
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    last = events[-1]
    # 16 tokens may cut the answer: OpenAI ends such a stream with response.incomplete.
    assert last.type in {"response.completed", "response.incomplete"}
    assert deltas and last.response.output_text == "".join(deltas)  # type: ignore[union-attr]
    if last.type == "response.incomplete":
        assert last.response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]


def test_function_tool_round_trip(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="small", input=ASK, tools=[TOOL], tool_choice="required", max_output_tokens=80
    )
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    second = client.responses.create(
        model="small",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[TOOL],
        tool_choice="none",
        max_output_tokens=24,
    )
    assert second.output[0].type == "message" and second.output_text


class Forecast(BaseModel):
    city: Literal["Paris", "London", "Tokyo"]
    days: int
    sunny: bool


def test_parse_returns_a_pydantic_object(client: openai.OpenAI) -> None:
    result = client.responses.parse(
        model="small", input=ASK, text_format=Forecast, max_output_tokens=60
    )
    parsed = result.output_parsed
    assert isinstance(parsed, Forecast) and parsed.city in {"Paris", "London", "Tokyo"}
