"""``/v1/messages`` with the official ``anthropic`` SDK, unchanged, against a real gateway
(uvicorn on loopback) on the fake engines (the fake plays a tool-calling model):
``messages.create``, ``messages.stream`` (the SDK's own accumulator), a tool-use round
trip, ``count_tokens``, ``x-api-key`` and its failure shape, the 400 for a missing
``max_tokens``, Anthropic's error shapes, the compatibility policy, an error mid-stream,
and the same request through chat, responses and messages on one tier, one exact-cache
entry and one price."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.gateway.budget_support import REDIS_URL, redis_prefix
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

WEATHER = {
    "name": "get_weather",
    "description": "The weather forecast for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
SCRIPT = [{"when": "weather", "call": "get_weather", "arguments": {"city": "Paris", "days": 3}}]
ASK = "What is the weather in Paris for the next 3 days?"
PNG = "iVBORw0KGgo="  # a PNG signature: what the part pricing reads is its rule
LIMITED_KEY = "tg-limited-key-000444555"
BROKE_KEY = "tg-broke-key-000666777"


def config_for(prefix: str) -> dict[str, Any]:
    config = fake_config(tools=True, tool_script=SCRIPT)
    config["tenants"]["strict"] = {
        "keys": [{"id": "strict-1", "from_env": "TIERGATE_STRICT_KEY"}],
        "compat": "strict",
    }
    config["tenants"]["limited"] = {
        "keys": [{"id": "limited-1", "from_env": "TIERGATE_LIMITED_KEY"}],
        "rate_limit": {"requests_per_minute": 1},
    }
    config["tenants"]["broke"] = {
        "keys": [{"id": "broke-1", "from_env": "TIERGATE_BROKE_KEY"}],
        "budget": {"limit_usd": 0.0, "window": "total"},
    }
    config["engines"]["fake-large"]["modalities"] = ["text", "image"]
    config["budgets"] = {"part_tokens": {"fake-large": {"image": 1000}}}  # priced: needs a rule
    config["redis_url"], config["redis_prefix"] = REDIS_URL, prefix
    return config


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    os.environ["TIERGATE_STRICT_KEY"] = "tg-strict-key-000222333"
    os.environ["TIERGATE_LIMITED_KEY"] = LIMITED_KEY
    os.environ["TIERGATE_BROKE_KEY"] = BROKE_KEY
    with redis_prefix() as prefix, running_gateway(config_for(prefix)) as running:
        yield running


def client_for(gateway: RunningGateway, key: str = TEST_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base_url, api_key=key, max_retries=0)


@pytest.fixture
def client(gateway: RunningGateway) -> anthropic.Anthropic:
    return client_for(gateway)


def fresh() -> dict[str, str]:
    return {"cache-control": "no-cache"}


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


def test_count_tokens_is_the_budget_estimate_and_charges_nothing(
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
    spent = httpx.get(
        gateway.base_url + "/v1/models", headers={"x-api-key": TEST_KEY}
    )  # x-api-key works on every tenant route
    assert spent.status_code == 200


def test_auth_failure_is_anthropics_shape(gateway: RunningGateway) -> None:
    wrong = client_for(gateway, key="tg-not-a-key-000000000")
    with pytest.raises(anthropic.AuthenticationError) as failed:
        wrong.messages.create(
            model="small", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert failed.value.status_code == 401
    assert failed.value.body["type"] == "error"  # type: ignore[index]
    assert failed.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    missing = httpx.post(gateway.base_url + "/v1/messages/count_tokens", json={})
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "authentication_error"
    # The same key as a Bearer token; chat keeps OpenAI's shape.
    bearer = httpx.post(
        gateway.base_url + "/v1/messages",
        json={"model": "small", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {TEST_KEY}"},
    )
    assert bearer.status_code == 200 and bearer.json()["type"] == "message"
    chat = httpx.post(gateway.base_url + "/v1/chat/completions", json={})
    assert chat.status_code == 401 and chat.json()["error"]["code"] == "invalid_api_key"


def test_missing_max_tokens_is_anthropics_400(gateway: RunningGateway) -> None:
    # The SDK refuses to send it; a hand-written client does.
    answer = httpx.post(
        gateway.base_url + "/v1/messages",
        json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": TEST_KEY, "anthropic-version": "2023-06-01"},
    )
    assert answer.status_code == 400
    assert answer.json()["type"] == "error"
    assert answer.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }
    assert answer.json()["request_id"] == answer.headers["x-request-id"]


@pytest.mark.parametrize(
    ("model", "status", "kind", "error"),
    [
        ("no-such-model", 404, "not_found_error", anthropic.NotFoundError),
        ("small", 400, "invalid_request_error", anthropic.BadRequestError),
    ],
)
def test_errors_are_anthropics_shape(
    client: anthropic.Anthropic, model: str, status: int, kind: str, error: type[Exception]
) -> None:
    extra = {"top_k": 5} if status == 400 else {}  # no fake engine honours top_k
    with pytest.raises(error) as failed:
        client.messages.create(
            model=model,
            max_tokens=8,
            messages=[{"role": "user", "content": "hi"}],
            extra_body=extra,
        )
    assert failed.value.status_code == status  # type: ignore[attr-defined]
    assert failed.value.body["error"]["type"] == kind  # type: ignore[attr-defined]


def test_rate_limits_and_budgets_are_anthropics_429(gateway: RunningGateway) -> None:
    question: Any = [{"role": "user", "content": f"Once only ({uuid.uuid4()})"}]
    limited = client_for(gateway, LIMITED_KEY)
    limited.messages.create(model="small", max_tokens=8, messages=question)
    with pytest.raises(anthropic.RateLimitError) as throttled:
        limited.messages.create(model="small", max_tokens=8, messages=question)
    assert throttled.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.RateLimitError) as broke:
        client_for(gateway, BROKE_KEY).messages.create(
            model="small", max_tokens=8, messages=question
        )
    assert broke.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert "quota" in broke.value.body["error"]["message"]  # type: ignore[index]


class BrokenKeys:
    async def authenticate(self, key: str) -> None:
        raise RuntimeError("a bug, not a client's error")


def test_an_unexpected_error_is_anthropics_500(gateway: RunningGateway) -> None:
    keys = gateway.state.keys
    gateway.state.keys = BrokenKeys()  # type: ignore[assignment]
    try:
        answer = httpx.post(
            gateway.base_url + "/v1/messages",
            json={"model": "small", "max_tokens": 8, "messages": []},
            headers={"x-api-key": TEST_KEY},
        )
    finally:
        gateway.state.keys = keys
    assert answer.status_code == 500
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert "a bug" not in answer.text and body["request_id"] == answer.headers["x-request-id"]


def test_an_unknown_messages_path_is_anthropics_404(gateway: RunningGateway) -> None:
    answer = httpx.post(gateway.base_url + "/v1/messages/batches", headers={"x-api-key": TEST_KEY})
    assert answer.status_code in (404, 405)
    assert answer.json()["type"] == "error"


def test_what_claude_code_sends_is_taken_and_named(gateway: RunningGateway) -> None:
    body = {
        "model": "small",
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": "You are an agent."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Say hello"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
        ],
        "tools": [
            {**WEATHER, "cache_control": {"type": "ephemeral"}},
            {"name": "web_search", "type": "web_search_20250305"},
        ],
        "metadata": {"user_id": "session-1"},
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "stream": True,
    }
    headers = {
        "x-api-key": TEST_KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,effort-2025-11-24",
    }
    with httpx.stream(
        "POST", gateway.base_url + "/v1/messages?beta=true", json=body, headers=headers
    ) as answer:
        text = "".join(answer.iter_text())
    assert answer.status_code == 200, text
    ignored = answer.headers["x-tiergate-ignored"].split(", ")
    assert {
        "context_management",
        "thinking",
        "metadata",
        "output_config.effort",
        "cache_control",
        "tools:web_search_20250305",
        "anthropic-beta:claude-code-20250219",
        "anthropic-beta:effort-2025-11-24",
    } <= set(ignored)
    assert "event: message_stop" in text
    strict = httpx.post(
        gateway.base_url + "/v1/messages",
        json={**body, "stream": False},
        headers={**headers, "x-api-key": "tg-strict-key-000222333"},
    )
    assert strict.status_code == 400
    assert "tools[1]" in strict.json()["error"]["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("container", "cntr_1"), ("mcp_servers", [{"type": "url"}]), ("made_up", 1)],
)
def test_what_cannot_be_honoured_is_a_400_naming_it(
    client: anthropic.Anthropic, field: str, value: Any
) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="small",
            max_tokens=8,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={field: value},
        )
    assert f"`{field}`" in refused.value.body["error"]["message"]  # type: ignore[index]


def test_an_error_mid_stream_is_an_error_event() -> None:
    with running_gateway(fake_config(fail_after_tokens=2)) as failing:
        client = client_for(failing)
        texts = []
        with pytest.raises(anthropic.APIStatusError) as failed:
            with client.messages.stream(
                model="small",
                max_tokens=64,
                messages=[{"role": "user", "content": "Fail"}],
                extra_headers=fresh(),
            ) as stream:
                texts.extend(e for e in stream if e.type == "text")
    assert len(texts) == 2
    assert failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_what_was_ignored_and_the_metadata_are_on_the_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with running_gateway(fake_config(), tracer_provider=provider) as traced:
        client_for(traced).messages.create(
            model="small",
            max_tokens=8,
            messages=[{"role": "user", "content": "Hi"}],
            metadata={"user_id": "user-7"},
            extra_body={"thinking": {"type": "enabled", "budget_tokens": 1024}},
        )
        for _ in range(200):  # the root span ends once the answer is written
            roots = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
            if roots:
                break
            time.sleep(0.01)
    [root] = roots
    assert root.attributes is not None
    assert root.attributes["tiergate.ignored"] == ("thinking", "metadata")
    assert root.attributes["tiergate.metadata.user_id"] == "user-7"
    assert root.attributes["tiergate.tier"] == "small"


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
