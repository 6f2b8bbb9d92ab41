"""The official openai SDK, unchanged, against a real gateway whose tier is a real SGLang
worker process around the fake engine (SGLang needs CUDA): tool loops, ``parse`` with a
Pydantic model, streamed tool-call deltas, and the 400s for what SGLang cannot honour.

What runs for real: the gateway, the worker process and its protocol, our request
shaping (template messages, the json_schema constraint) and response shaping (OpenAI
deltas from FunctionCallParser items, the call array). What is faked: the engine (it
writes a schema instance where a grammar would constrain it) and SGLang's
FunctionCallParser (same interface, hermes format only)."""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway
from tiergate_testing.tools import (
    NAMED,
    TIME,
    single_tool_call,
    stream_tool_calls,
    tool_result_turn,
)
from tiergate_testing.tools import TOOLS as TOOLS_WEATHER_FIRST

pytestmark = pytest.mark.slow

# get_time first: a named choice must pick the second tool, not the first.
TOOLS: list[Any] = TOOLS_WEATHER_FIRST[::-1]
ASK = [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris, 3 days?"}]}]
CHOICES: dict[str, Any] = {"auto": "auto", "required": "required", "named": NAMED}


@pytest.fixture
def client(sglang_gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=sglang_gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


@pytest.mark.parametrize("choice", list(CHOICES))
def test_two_turn_tool_loop(client: openai.OpenAI, choice: str) -> None:
    first = client.chat.completions.create(
        model="small", messages=ASK, tools=TOOLS, tool_choice=CHOICES[choice], max_tokens=80
    )
    call = single_tool_call(first, named=choice == "named")
    assert call.id.startswith("call_")
    history = tool_result_turn(ASK, first, call)
    second = client.chat.completions.create(
        model="small", messages=history, tools=TOOLS, max_tokens=12
    )
    assert second.choices[0].finish_reason in {"stop", "length"}
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls
    assert second.usage is not None and first.usage is not None
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


@pytest.mark.parametrize("choice", list(CHOICES))
def test_streamed_tool_call_deltas_assemble_into_the_non_stream_call(
    client: openai.OpenAI, choice: str
) -> None:
    params: Any = {
        "model": "small",
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": CHOICES[choice],
        "max_tokens": 80,
    }
    expected: Any = client.chat.completions.create(**params).choices[0].message.tool_calls
    assert expected and len(expected) == 1
    calls, finish, fragments = stream_tool_calls(client, params)
    assert finish == "tool_calls" and list(calls) == [0]
    if choice == "auto":
        assert fragments > 1  # SGLang's parser streams the arguments in pieces
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["name"] == expected[0].function.name
    assert calls[0]["arguments"] == expected[0].function.arguments


class Forecast(BaseModel):
    city: Literal["Paris", "London", "Tokyo"]
    days: int = Field(ge=1, le=7)
    sunny: bool


def test_parse_returns_a_pydantic_object(client: openai.OpenAI) -> None:
    result = client.chat.completions.parse(
        model="small", messages=ASK, response_format=Forecast, max_tokens=60
    )
    assert isinstance(result.choices[0].message.parsed, Forecast)


def test_json_object_is_a_json_object(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="small", messages=ASK, response_format={"type": "json_object"}, max_tokens=40
    )
    assert isinstance(json.loads(result.choices[0].message.content or ""), dict)


def _post(gateway: RunningGateway, **body: Any) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={"model": "small", "messages": ASK, "max_tokens": 8, **body},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=60,
    )


def test_what_sglang_cannot_honour_is_a_400_naming_it(sglang_gateway: RunningGateway) -> None:
    strict = [{"type": "function", "function": {"name": "f", "parameters": TIME, "strict": True}}]
    response = _post(sglang_gateway, tools=strict, tool_choice="auto")
    assert response.status_code == 400, response.text
    assert "tools[0].function.strict" in response.json()["error"]["message"]
    assert _post(sglang_gateway, tools=strict, tool_choice="required").status_code == 200
    response = _post(sglang_gateway, logprobs=True)
    assert response.status_code == 400 and response.json()["error"]["param"] == "logprobs"
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    response = _post(sglang_gateway, messages=image)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_content"
