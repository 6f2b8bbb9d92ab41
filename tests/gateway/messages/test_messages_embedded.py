"""``/v1/messages`` with the official ``anthropic`` SDK on the embedded default
(SmolLM2-135M on llama.cpp, grammar-constrained tools): ``messages.create``,
``messages.stream``, a tool-use round trip (``tool_choice: any``), a stop sequence and
``count_tokens``. The model is tiny: the assertions are on shape and schema validity,
never on answer quality."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import jsonschema
import pytest

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
    "name": "get_weather",
    "description": "The weather forecast for a city",
    "input_schema": WEATHER,
}
ASK = "What is the weather in Paris for the next 3 days?"


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    gateway: RunningGateway
    with running_gateway(smollm2_config(replicas=1)) as gateway:
        yield anthropic.Anthropic(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0)


def test_create(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="small",
        max_tokens=12,
        system="Answer in one sentence.",
        messages=[{"role": "user", "content": "Name a colour."}],
    )
    assert message.model == "smollm2-135m-instruct"
    [block] = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason in {"end_turn", "max_tokens"}
    assert message.usage.input_tokens > 10 and 0 < message.usage.output_tokens <= 12


def test_stream(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="small", max_tokens=16, messages=[{"role": "user", "content": "Count to five."}]
    ) as stream:
        texts = [e.text for e in stream if e.type == "text"]
        final = stream.get_final_message()
    [block] = final.content
    assert texts and block.type == "text" and block.text == "".join(texts)
    assert final.stop_reason in {"end_turn", "max_tokens"}
    assert final.usage.output_tokens > 0


def test_a_stop_sequence(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="small",
        max_tokens=40,
        stop_sequences=["3"],
        messages=[{"role": "user", "content": "Count from 1 to 10, digits with spaces."}],
    )
    [block] = message.content
    assert block.type == "text" and "3" not in block.text
    if message.stop_reason == "stop_sequence":  # the model counted past 2
        assert message.stop_sequence == "3"


def test_a_tool_use_round_trip(client: anthropic.Anthropic) -> None:
    first = client.messages.create(
        model="small",
        max_tokens=80,
        tools=[TOOL],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": ASK}],
    )
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather"
    jsonschema.validate(call.input, WEATHER)
    second = client.messages.create(
        model="small",
        max_tokens=24,
        tools=[TOOL],
        tool_choice={"type": "none"},
        messages=[
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
            },
        ],
    )
    assert second.content[0].type == "text" and second.content[0].text
    assert second.stop_reason in {"end_turn", "max_tokens"}


def test_count_tokens_bounds_the_prompt(client: anthropic.Anthropic) -> None:
    question: Any = [{"role": "user", "content": ASK}]
    counted = client.messages.count_tokens(model="small", messages=question)
    ran = client.messages.create(model="small", max_tokens=4, messages=question)
    # An upper estimate (the one a budget reservation uses), never under the real count.
    assert counted.input_tokens >= ran.usage.input_tokens > 0
