"""Hostile edges, each a clear 4xx in its family's shape that changes nothing: a body
nested past the depth limit, two different keys in one request, a tenant at its cap of
stored Responses, and the conversations Anthropic and OpenAI refuse (an empty turn, a
tool result answering no call). Through a real gateway (uvicorn, the official clients)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.wire.common import MAX_JSON_DEPTH
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

ADMIN_KEY = "tg-admin-key-for-the-edge-tests"
DEEP = 300


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"x": value}}
    return value


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    config = fake_config()
    config["responses"] = {"tenant_max_count": 3}
    config["admin"] = {"key_from_env": "TIERGATE_EDGE_TEST_ADMIN"}
    monkey = pytest.MonkeyPatch()
    monkey.setenv("TIERGATE_EDGE_TEST_ADMIN", ADMIN_KEY)
    try:
        with running_gateway(config) as running:
            yield running
    finally:
        monkey.undo()


def post(gateway: RunningGateway, path: str, body: Any, **headers: str) -> httpx.Response:
    auth = {"authorization": f"Bearer {TEST_KEY}", **headers}
    return httpx.post(gateway.base_url + path, json=body, headers=auth, timeout=30)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            {
                "model": "small",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": nested(DEEP)}}
                ],
            },
            "tools",
        ),
        (
            "/v1/completions",
            {"model": "small", "prompt": "hi", "response_format": nested(DEEP)},
            "response_format",
        ),
        (
            "/v1/responses",
            {
                "model": "small",
                "input": "hi",
                "text": {"format": {"type": "json_schema", "name": "n", "schema": nested(DEEP)}},
            },
            "text",
        ),
        (
            "/v1/messages",
            {
                "model": "small",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"name": "f", "input_schema": nested(DEEP)}],
            },
            "tools",
        ),
    ],
)
def test_a_body_nested_past_the_limit_is_a_400_naming_the_field(
    gateway: RunningGateway, path: str, body: dict[str, Any], param: str
) -> None:
    answer = post(gateway, path, body)
    assert answer.status_code == 400, answer.text
    if path.startswith("/v1/messages"):  # Anthropic's shape on its family
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"].startswith(param)
    else:
        error = answer.json()["error"]
        assert error["param"] == param and str(MAX_JSON_DEPTH) in error["message"]


def test_a_body_just_inside_the_limit_passes_the_check(gateway: RunningGateway) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": nested(25)}}
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}
    answer = post(gateway, "/v1/chat/completions", body)
    # Parsed whole: what refuses it now is the fake tier, which runs no tools.
    assert answer.json()["error"]["code"] == "unsupported_parameter", answer.text


def test_two_different_keys_in_one_request_are_a_401(gateway: RunningGateway) -> None:
    chat = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
    both = post(gateway, "/v1/chat/completions", chat, **{"x-api-key": OTHER_KEY})
    assert both.status_code == 401
    message = both.json()["error"]["message"]
    assert "Authorization: Bearer" in message and "x-api-key" in message
    anthropic_body = {**chat, "max_tokens": 8}
    refused = post(gateway, "/v1/messages", anthropic_body, **{"x-api-key": OTHER_KEY})
    assert refused.status_code == 401 and refused.json()["type"] == "error"
    same = post(gateway, "/v1/chat/completions", chat, **{"x-api-key": TEST_KEY})
    assert same.status_code == 200


def test_stored_responses_stop_at_the_tenants_cap_and_the_admin_api_shows_it(
    gateway: RunningGateway,
) -> None:
    api = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    kept = [api.responses.create(model="small", input=f"note {i}").id for i in range(3)]
    with pytest.raises(openai.BadRequestError) as full:
        api.responses.create(model="small", input="one too many")
    assert full.value.code == "stored_responses_limit"
    assert api.responses.create(model="small", input="not kept", store=False).store is False
    usage = tenant_row(gateway, "acme")["stored"]["responses"]
    assert usage["count"] == 3 and usage["max_count"] == 3 and usage["bytes"] > 0
    api.responses.delete(kept[0])
    assert api.responses.create(model="small", input="room again").id
    # The other tenant's cap is its own.
    other = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=OTHER_KEY, max_retries=0)
    assert other.responses.create(model="small", input="globex keeps its own").id
    assert tenant_row(gateway, "globex")["stored"]["responses"]["count"] == 1


def tenant_row(gateway: RunningGateway, name: str) -> dict[str, Any]:
    answer = httpx.get(
        gateway.base_url + "/admin/api/tenants", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert answer.status_code == 200, answer.text
    (row,) = [r for r in answer.json()["data"] if r["name"] == name]
    return row


def test_anthropic_refuses_an_empty_turn_and_an_unanswered_tool_result(
    gateway: RunningGateway,
) -> None:
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as empty:
        client.messages.create(
            model="small", max_tokens=8, messages=[{"role": "user", "content": []}]
        )
    assert "non-empty content" in str(empty.value)
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    with pytest.raises(anthropic.BadRequestError) as orphan:
        client.messages.create(
            model="small",
            max_tokens=8,
            messages=[
                {"role": "user", "content": "use f"},
                {"role": "assistant", "content": [call]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}],
                },
            ],
        )
    assert "toolu_2" in str(orphan.value)
    # The same conversation answering the call it made is served.
    answered = client.messages.create(
        model="small",
        max_tokens=8,
        messages=[
            {"role": "user", "content": "use f"},
            {"role": "assistant", "content": [call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}],
            },
        ],
    )
    assert answered.type == "message"


def test_responses_refuses_an_output_for_an_unknown_call(gateway: RunningGateway) -> None:
    api = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=OTHER_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as unknown:
        api.responses.create(
            model="small",
            store=False,
            input=[
                {"role": "user", "content": "use f"},
                {"type": "function_call_output", "call_id": "call_nope", "output": "x"},
            ],
        )
    assert "call_nope" in str(unknown.value)
    served = api.responses.create(
        model="small",
        store=False,
        input=[
            {"role": "user", "content": "use f"},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "x"},
        ],
    )
    assert served.status == "completed"
