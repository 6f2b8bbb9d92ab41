"""The official openai SDK, unchanged, against a real gateway over in-process vLLM on CPU
(the tiny random Llama, vLLM's hermes tool parser): a two-turn tool loop, ``parse`` with a
Pydantic model, streamed tool-call deltas, logprobs. The weights are random, so the
assertions are on shape and schema validity, which constrained decoding guarantees."""

from __future__ import annotations

import json
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel, Field

from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway
from tiergate_testing.tools import (
    ASK,
    NAMED,
    TOOLS,
    single_tool_call,
    stream_tool_calls,
    tool_result_turn,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def client(vllm_gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=vllm_gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


@pytest.mark.parametrize("choice", ["required", "named"])
def test_two_turn_tool_loop(client: openai.OpenAI, choice: str) -> None:
    tool_choice: Any = "required" if choice == "required" else NAMED
    first = client.chat.completions.create(
        model="small", messages=ASK, tools=TOOLS, tool_choice=tool_choice, max_tokens=60, seed=1
    )
    call = single_tool_call(first, named=choice == "named")
    # The second leg: the call and the tool's result, rendered by the engine's template.
    history = tool_result_turn(ASK, first, call)
    second = client.chat.completions.create(
        model="small", messages=history, tools=TOOLS, tool_choice="none", max_tokens=12
    )
    assert second.choices[0].finish_reason in {"stop", "length"}
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls
    assert second.usage is not None
    assert first.usage is not None and second.usage.prompt_tokens > first.usage.prompt_tokens


class Forecast(BaseModel):
    city: Literal["Paris", "London", "Tokyo"]
    days: int = Field(ge=1, le=7)
    sunny: bool


def test_parse_returns_a_pydantic_object(client: openai.OpenAI) -> None:
    result = client.chat.completions.parse(
        model="small", messages=ASK, response_format=Forecast, max_tokens=60, seed=2
    )
    parsed = result.choices[0].message.parsed
    assert isinstance(parsed, Forecast) and 1 <= parsed.days <= 7


def test_json_object_is_a_json_object(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="small", messages=ASK, response_format={"type": "json_object"}, max_tokens=40
    )
    text = result.choices[0].message.content or ""
    if result.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # cut by max_tokens: a prefix of one
        assert text.startswith("{")


@pytest.mark.parametrize("choice", ["required", "named"])
def test_streamed_tool_call_deltas_assemble_into_the_non_stream_call(
    client: openai.OpenAI, choice: str
) -> None:
    params: Any = {
        "model": "small",
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": "required" if choice == "required" else NAMED,
        "max_tokens": 60,
        "temperature": 0,
    }
    expected: Any = client.chat.completions.create(**params).choices[0].message.tool_calls
    assert expected and len(expected) == 1
    calls, finish, fragments = stream_tool_calls(client, params)
    assert finish == "tool_calls" and list(calls) == [0]
    if choice == "named":
        assert fragments > 1  # arguments arrive in pieces
    assert calls[0]["id"]
    assert calls[0]["name"] == expected[0].function.name
    assert calls[0]["arguments"] == expected[0].function.arguments


def test_logprobs_have_one_entry_per_completion_token(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="small", messages=ASK, max_tokens=10, logprobs=True, top_logprobs=3, seed=5
    )
    logprobs = result.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None and result.usage is not None
    assert len(logprobs.content) == result.usage.completion_tokens > 0
    for entry in logprobs.content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-6
    # (tokens are not joined back into the text: a token holding part of a UTF-8 character
    # decodes to "" alone, while the text shows the replacement character)
    streamed, usage = 0, None
    for event in client.chat.completions.create(
        model="small",
        messages=ASK,
        max_tokens=10,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
    ):
        usage = event.usage or usage
        if event.choices and event.choices[0].logprobs and event.choices[0].logprobs.content:
            streamed += len(event.choices[0].logprobs.content)
    assert usage is not None and streamed == usage.completion_tokens


def test_auto_and_none_answer_text_or_a_parsed_call(client: openai.OpenAI) -> None:
    for tool_choice in ("auto", "none"):
        result = client.chat.completions.create(
            model="small", messages=ASK, tools=TOOLS, tool_choice=tool_choice, max_tokens=8
        )
        message = result.choices[0].message
        if tool_choice == "none" or not message.tool_calls:
            assert message.content and not message.tool_calls
        else:  # the hermes parser found a call in the model's own format
            assert result.choices[0].finish_reason == "tool_calls"
