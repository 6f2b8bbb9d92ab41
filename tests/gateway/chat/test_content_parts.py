"""Content parts through every layer (wire, features, cache key, budget bytes, routing)
on the protocol fake: text parts are text everywhere; a modality a tier lacks is a 400
``unsupported_content`` naming the part, and ``auto`` moves to a tier that has it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    config = fake_config()
    config["engines"]["fake-large"]["modalities"] = ["text", "image"]
    config["budgets"] = {"part_tokens": {"fake-large": {"image": 1000}}}  # priced: needs a rule
    with running_gateway(config) as running:
        yield running


def post(gateway: RunningGateway, **body: Any) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={"max_tokens": 4, **body},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    )


def test_text_parts_and_a_tool_loop_history_are_accepted(gateway: RunningGateway) -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sun"}]},
    ]
    response = post(gateway, model="auto", messages=messages)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]


def test_auto_moves_an_image_to_the_tier_that_reads_images(gateway: RunningGateway) -> None:
    content = [{"type": "text", "text": "What is this?"}, IMAGE]
    response = post(gateway, model="auto", messages=[{"role": "user", "content": content}])
    assert response.status_code == 200, response.text
    assert response.headers["x-tiergate-tier"] == "large"


def test_a_named_text_only_tier_refuses_an_image(gateway: RunningGateway) -> None:
    content = [{"type": "text", "text": "What is this?"}, IMAGE]
    response = post(gateway, model="small", messages=[{"role": "user", "content": content}])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unsupported_content"
    assert error["param"] == "messages[0].content[1]"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ([{"type": "video", "video": {}}], "messages[0].content"),
        ([{"type": "text"}], "messages[0].content"),
    ],
)
def test_malformed_parts_are_400_naming_them(
    gateway: RunningGateway, content: Any, fragment: str
) -> None:
    response = post(gateway, model="small", messages=[{"role": "user", "content": content}])
    assert response.status_code == 400
    assert response.json()["error"]["param"] == fragment


def test_a_tool_on_a_tier_without_tools_is_400_naming_it(gateway: RunningGateway) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "x"}]
    response = post(gateway, model="small", messages=messages, tools=tools)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools"
    assert response.json()["error"]["code"] == "unsupported_parameter"
