"""Real clients, unchanged, against a real gateway on the embedded default (SmolLM2-135M
on llama.cpp): content parts, a two-turn tool loop, structured outputs, streamed tool
calls, logprobs. The model is tiny, so the assertions are on shape and schema validity
(which constrained decoding guarantees), never on answer quality."""

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
from tiergate_testing.tools import ASK, NAMED, stream_tool_calls
from tiergate_testing.tools import WEATHER as WEATHER_SCHEMA

pytestmark = pytest.mark.slow

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city",
            "parameters": WEATHER_SCHEMA,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The local time in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
]


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with running_gateway(smollm2_config(replicas=1)) as running:
        yield running


@pytest.fixture
def client(gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def test_text_parts_in_system_and_user(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="small",
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "Answer in one word."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Name a colour"},
                    {"type": "text", "text": "of the sky."},
                ],
            },
        ],
        max_tokens=8,
    )
    assert result.choices[0].message.content
    assert result.usage is not None and result.usage.prompt_tokens > 10


@pytest.mark.parametrize("choice", ["required", "named"])
def test_two_turn_tool_loop(client: openai.OpenAI, choice: str) -> None:
    tool_choice: Any = "required" if choice == "required" else NAMED
    first = client.chat.completions.create(
        model="small", messages=ASK, tools=TOOLS, tool_choice=tool_choice, max_tokens=80, seed=1
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.content is None and message.tool_calls and len(message.tool_calls) == 1
    call: Any = message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    if choice == "named":
        assert call.function.name == "get_weather"
    schema = next(
        t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.function.name
    )
    jsonschema.validate(json.loads(call.function.arguments), schema)
    # The second leg: the assistant's call and the tool's result go back to the model.
    history: list[Any] = [
        *ASK,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny, 21 C"}'},
    ]
    assert history[1]["role"] == "assistant" and "content" not in history[1]
    second = client.chat.completions.create(
        model="small", messages=history, tools=TOOLS, tool_choice="none", max_tokens=24
    )
    assert second.choices[0].finish_reason in {"stop", "length"}
    assert second.choices[0].message.content
    assert not second.choices[0].message.tool_calls


class Forecast(BaseModel):
    city: Literal["Paris", "London", "Tokyo"]
    days: int
    sunny: bool


def test_parse_returns_a_pydantic_object(client: openai.OpenAI) -> None:
    result = client.chat.completions.parse(
        model="small", messages=ASK, response_format=Forecast, max_tokens=60, seed=2
    )
    parsed = result.choices[0].message.parsed
    assert isinstance(parsed, Forecast)
    assert parsed.city in {"Paris", "London", "Tokyo"}


def test_json_object_is_a_json_object(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": "Give me a JSON object about Paris."}],
        response_format={"type": "json_object"},
        max_tokens=60,
        seed=3,
    )
    if result.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(result.choices[0].message.content or ""), dict)
    else:  # cut by max_tokens: still a JSON prefix starting an object
        assert (result.choices[0].message.content or "").lstrip().startswith("{")


def test_streamed_tool_call_deltas_assemble_into_the_non_stream_call(
    client: openai.OpenAI,
) -> None:
    params: Any = {
        "model": "small",
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": NAMED,
        "max_tokens": 80,
        "temperature": 0,
        "seed": 4,
    }
    whole = client.chat.completions.create(**params)
    expected: Any = whole.choices[0].message.tool_calls
    assert expected
    calls, finish, fragments = stream_tool_calls(client, params)
    assert finish == "tool_calls"
    assert list(calls) == [0] and fragments > 1  # arguments arrive in pieces
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["name"] == expected[0].function.name
    assert calls[0]["arguments"] == expected[0].function.arguments


def test_logprobs_have_one_entry_per_completion_token(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="small", messages=ASK, max_tokens=12, logprobs=True, top_logprobs=3, seed=5
    )
    logprobs = result.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None and result.usage is not None
    assert len(logprobs.content) == result.usage.completion_tokens > 0
    for entry in logprobs.content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-6 or entry.logprob <= 0
    assert "".join(e.token for e in logprobs.content) == result.choices[0].message.content
    streamed = 0
    usage = None
    for event in client.chat.completions.create(
        model="small",
        messages=ASK,
        max_tokens=12,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
    ):
        usage = event.usage or usage
        if event.choices and event.choices[0].logprobs and event.choices[0].logprobs.content:
            streamed += len(event.choices[0].logprobs.content)
    assert usage is not None and streamed == usage.completion_tokens


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}},
    ],
)
def test_non_text_parts_on_a_text_only_tier_are_400(client: openai.OpenAI, part: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": [{"type": "text", "text": "What?"}, part]}],
            max_tokens=4,
        )
    assert info.value.code == "unsupported_content"
    assert info.value.param == "messages[0].content[1]"
