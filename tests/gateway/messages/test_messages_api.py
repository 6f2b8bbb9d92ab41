"""``/v1/messages`` with the official ``anthropic`` SDK, unchanged, against a real gateway
(uvicorn on loopback) on the fake engines (the fake plays a tool-calling model):
``messages.create``, ``messages.stream`` (the SDK's own accumulator), image blocks, stop
sequences, a tool-use round trip (whole and streamed), ``count_tokens``, and the same
request through chat, responses and messages on one tier, one exact-cache entry and one
price. Errors, auth and the compatibility policy: ``test_messages_errors.py``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.gateway.messages_support import ASK, PNG, WEATHER, client_for, fresh, messages_gateway
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with messages_gateway() as running:
        yield running


@pytest.fixture
def client(gateway: RunningGateway) -> anthropic.Anthropic:
    return client_for(gateway)


def test_create_answers_with_a_message(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model="small",
        max_tokens=64,
        system="You are terse.",
        messages=[{"role": "user", "content": "Say hello"}],
        extra_headers=fresh(),
    )
    message = raw.parse()
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.role == "assistant" and message.model == "fake-small"
    [block] = message.content
    assert block.type == "text" and block.text.strip()
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens == 8
    assert raw.headers["x-tiergate-tier"] == "small"
    assert float(raw.headers["x-tiergate-cost-usd"]) > 0
    # A model id routes to its tier, as on chat.
    pinned = client.messages.with_raw_response.create(
        model="fake-medium", max_tokens=8, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert pinned.headers["x-tiergate-tier"] == "medium"
    assert pinned.parse().model == "fake-medium"


def test_image_blocks_take_the_content_part_path(client: anthropic.Anthropic) -> None:
    content: Any = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
    raw = client.messages.with_raw_response.create(
        model="auto", max_tokens=8, messages=[{"role": "user", "content": content}]
    )
    assert raw.headers["x-tiergate-tier"] == "large"  # auto moved it to the tier that reads images
    assert raw.parse().content[0].type == "text"
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="small", max_tokens=8, messages=[{"role": "user", "content": content}]
        )
    assert "image" in refused.value.body["error"]["message"]  # type: ignore[index]


def test_max_tokens_and_stop_sequences_end_the_answer(client: anthropic.Anthropic) -> None:
    cut = client.messages.create(
        model="small", max_tokens=3, messages=[{"role": "user", "content": "Count"}]
    )
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    whole = client.messages.create(
        model="small", max_tokens=64, messages=[{"role": "user", "content": "Count"}]
    )
    [text] = whole.content
    assert text.type == "text"
    stop = text.text.split()[2]  # the third word: the answer stops before it
    stopped = client.messages.create(
        model="small",
        max_tokens=64,
        stop_sequences=[stop],
        messages=[{"role": "user", "content": "Count"}],
    )
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    [short] = stopped.content
    assert short.type == "text" and stop not in short.text
    assert text.text.startswith(short.text)


def test_stream_is_the_event_sequence_the_sdk_accumulates(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="small",
        max_tokens=64,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Stream to me"}]}],
        extra_headers=fresh(),
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert kinds.count("text") == 8  # the SDK's own event per text delta
    [block] = final.content
    assert block.type == "text" and len(block.text.split()) == 8
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 8 and final.usage.input_tokens > 0


def test_a_ping_follows_message_start(gateway: RunningGateway) -> None:
    body = {"model": "small", "max_tokens": 16, "stream": True}
    body["messages"] = [{"role": "user", "content": "Ping me"}]
    with httpx.stream(
        "POST",
        gateway.base_url + "/v1/messages",
        json=body,
        headers={"x-api-key": TEST_KEY, "anthropic-version": "2023-06-01"},
    ) as answer:
        lines = [line for line in answer.iter_lines() if line.startswith("event: ")]
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert lines[:2] == ["event: message_start", "event: ping"]
    assert lines[-1] == "event: message_stop"


def test_a_tool_use_round_trip(client: anthropic.Anthropic) -> None:
    first = client.messages.create(
        model="small",
        max_tokens=256,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": ASK}],
    )
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "Paris", "days": 3}
    second = client.messages.create(
        model="small",
        max_tokens=256,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": [{"type": "text", "text": "Sunny, 24 C, all three days"}],
                    }
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    [text] = second.content
    assert text.type == "text" and "Sunny, 24 C" in text.text


def test_a_streamed_tool_use_and_an_error_result(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="small",
        max_tokens=256,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "auto"},
        messages=[{"role": "user", "content": ASK}],
    ) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas and all(d.delta.type == "input_json_delta" for d in deltas)
    [call] = final.content
    assert call.type == "tool_use" and call.input == {"city": "Paris", "days": 3}
    assert final.stop_reason == "tool_use"
    answer = client.messages.create(
        model="small",
        max_tokens=256,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": final.content},  # type: ignore[typeddict-item]
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": "the weather service is down",
                        "is_error": True,
                    }
                ],
            },
        ],
    )
    [text] = answer.content
    assert text.type == "text" and "Error: the weather service is down" in text.text


def test_count_tokens_is_the_budget_estimate(
    gateway: RunningGateway, client: anthropic.Anthropic
) -> None:
    question = [{"role": "user", "content": "How many tokens is this question, roughly?"}]
    counted = client.messages.count_tokens(model="small", messages=question)  # type: ignore[arg-type]
    longer = client.messages.count_tokens(
        model="small",
        system="A long system prompt. " * 50,
        messages=question,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert 0 < counted.input_tokens < longer.input_tokens
    run = client.messages.create(model="small", max_tokens=16, messages=question)  # type: ignore[arg-type]
    assert counted.input_tokens >= run.usage.input_tokens  # an upper estimate
    # x-api-key works on every tenant route
    models = httpx.get(gateway.base_url + "/v1/models", headers={"x-api-key": TEST_KEY})
    assert models.status_code == 200


def test_chat_responses_and_messages_share_a_tier_a_cache_entry_and_a_price(
    gateway: RunningGateway, client: anthropic.Anthropic
) -> None:
    """The same question through the three endpoints: one tier, one exact-cache entry (the
    first call fills it, the other two hit it), one answer and one price."""
    # Unique per run: the cache's Redis keys outlive the test (cache.key_prefix).
    text = f"One question on three endpoints ({uuid.uuid4()})."
    question = [{"role": "user", "content": text}]
    oa = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    chat = oa.chat.completions.with_raw_response.create(
        model="auto",
        messages=question,
        max_tokens=32,
        temperature=0,  # type: ignore[arg-type]
    )
    responses = oa.responses.with_raw_response.create(
        model="auto",
        input=question,
        max_output_tokens=32,
        temperature=0,
        store=False,  # type: ignore[arg-type]
    )
    messages = client.messages.with_raw_response.create(
        model="auto",
        messages=question,  # type: ignore[arg-type]
        max_tokens=32,
        extra_body={"temperature": 0},  # the SDK no longer types it
    )
    heads = [r.headers for r in (chat, responses, messages)]
    assert [h["x-tiergate-cache"] for h in heads] == ["miss", "exact", "exact"]
    assert len({h["x-tiergate-tier"] for h in heads}) == 1
    answer = chat.parse().choices[0].message.content
    assert responses.parse().output_text == answer
    [block] = messages.parse().content
    assert block.type == "text" and block.text == answer
    # A hit is charged the same on every endpoint; so is a live answer (no cache).
    assert heads[1]["x-tiergate-cost-usd"] == heads[2]["x-tiergate-cost-usd"]
    bypass = {"cache-control": "no-cache, no-store"}
    live_chat = oa.chat.completions.with_raw_response.create(
        model="medium",
        messages=question,
        max_tokens=32,
        extra_headers=bypass,  # type: ignore[arg-type]
    )
    live_messages = client.messages.with_raw_response.create(
        model="medium",
        messages=question,
        max_tokens=32,
        extra_headers=bypass,  # type: ignore[arg-type]
    )
    assert live_messages.headers["x-tiergate-cache"] == "bypass"
    assert float(live_messages.headers["x-tiergate-cost-usd"]) == pytest.approx(
        float(live_chat.headers["x-tiergate-cost-usd"])
    )
    assert float(live_chat.headers["x-tiergate-cost-usd"]) > 0
