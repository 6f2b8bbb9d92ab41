"""``/v1/messages`` errors, auth and the compatibility policy with the official
``anthropic`` SDK against a real gateway on the fake engines: ``x-api-key`` (and Bearer)
and the auth failure's shape, the 400 for a missing ``max_tokens``, Anthropic's error
shapes and statuses (404, 400, 429 for a rate limit and an empty budget, 500), what
Claude Code sends taken and named, what cannot be honoured refused, an error mid-stream,
and the trace."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.gateway.messages_support import (
    BROKE_KEY,
    LIMITED_KEY,
    STRICT_KEY,
    WEATHER,
    client_for,
    fresh,
    messages_gateway,
)
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with messages_gateway() as running:
        yield running


@pytest.fixture
def client(gateway: RunningGateway) -> anthropic.Anthropic:
    return client_for(gateway)


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
    # count_tokens needs neither budget nor rate: it holds and charges nothing.
    for key in (BROKE_KEY, LIMITED_KEY, LIMITED_KEY):
        counted = client_for(gateway, key).messages.count_tokens(model="small", messages=question)
        assert counted.input_tokens > 0


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
    answer = httpx.post(gateway.base_url + "/v1/messages/drafts", headers={"x-api-key": TEST_KEY})
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
        headers={**headers, "x-api-key": STRICT_KEY},
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
