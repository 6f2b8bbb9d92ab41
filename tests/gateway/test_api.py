"""The OpenAI surface over the protocol fake: a real uvicorn, the official client."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway


@pytest.fixture(scope="module")
def gateway():  # type: ignore[no-untyped-def]
    with running_gateway(fake_config()) as running:
        yield running


@pytest.fixture
def client(gateway) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def test_chat_non_stream_returns_text_usage_and_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="medium", messages=[{"role": "user", "content": "hello there"}], max_tokens=5
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 5
    assert completion.usage.prompt_tokens == 2
    assert completion.choices[0].finish_reason == "length"
    assert raw.headers["x-tiergate-tier"] == "medium"
    assert raw.headers["x-tiergate-model"] == "fake-medium"
    assert raw.headers["x-request-id"] == completion.id
    assert float(raw.headers["x-tiergate-cost-usd"]) == pytest.approx((2 * 1.0 + 5 * 2.0) / 1e6)


def test_stream_matches_non_stream_and_reports_usage(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "count to three"}]
    whole = client.chat.completions.create(model="small", messages=messages, seed=7)
    stream = client.chat.completions.create(
        model="small",
        messages=messages,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas, usage, finish = [], None, None
    for event in stream:
        if event.usage is not None:
            usage = event.usage
        for choice in event.choices:
            deltas.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(deltas) == whole.choices[0].message.content
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]
    assert finish == "stop"


def test_model_field_accepts_auto_tier_and_model_id(client: openai.OpenAI) -> None:
    for model, tier in (("auto", "small"), ("large", "large"), ("fake-medium", "medium")):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "x"}]
        )
        assert raw.headers["x-tiergate-tier"] == tier


def test_models_lists_tiers_and_models(client: openai.OpenAI) -> None:
    ids = {m.id for m in client.models.list()}
    assert {"auto", "small", "medium", "large", "fake-small", "fake-medium", "fake-large"} <= ids


def test_text_completions(client: openai.OpenAI) -> None:
    result = client.completions.create(model="small", prompt="Once upon", max_tokens=3)
    assert result.choices[0].text
    assert result.usage is not None and result.usage.completion_tokens == 3


def test_bad_key_is_401(gateway) -> None:  # type: ignore[no-untyped-def]
    bad = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "invalid_api_key"
    missing = httpx.post(gateway.base_url + "/v1/chat/completions", json={})
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_api_key"


def test_malformed_body_is_400_naming_the_param(gateway, client) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "x"}], temperature=7
        )
    assert info.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="small", messages=[{"role": "wizard", "content": "x"}])
    assert info.value.param == "messages[0].role"
    response = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        content=b"{not json",
        headers={"authorization": f"Bearer {TEST_KEY}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "x"}], n=2
        )
    assert info.value.param == "n"


def test_an_unknown_field_a_local_engine_cannot_honour_is_a_400(gateway) -> None:  # type: ignore[no-untyped-def]
    response = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": "x"}], "frobnicate": True},
        headers={"authorization": f"Bearer {TEST_KEY}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "frobnicate"


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"


def test_oversized_body_is_413_and_nothing_runs(gateway) -> None:  # type: ignore[no-untyped-def]
    before = gateway.state.parts.replicas["fake-small"][0].engine.counters.started
    huge = "x" * (gateway.state.config.server.max_body_bytes + 10)
    response = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": huge}]},
        headers={"authorization": f"Bearer {TEST_KEY}"},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert gateway.state.parts.replicas["fake-small"][0].engine.counters.started == before


def test_second_tenant_key_works(gateway) -> None:  # type: ignore[no-untyped-def]
    other = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=OTHER_KEY, max_retries=0)
    result = other.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "hi"}]
    )
    assert result.choices[0].message.content


def test_health_and_readiness(gateway) -> None:  # type: ignore[no-untyped-def]
    assert httpx.get(gateway.base_url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(gateway.base_url + "/readyz")
    assert ready.status_code == 200
    assert ready.json()["tiers"] == {"small": True, "medium": True, "large": True}


def test_unknown_route_is_openai_shaped_404(gateway) -> None:  # type: ignore[no-untyped-def]
    response = httpx.get(gateway.base_url + "/v1/nothing")
    assert response.status_code == 404
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_error_after_first_byte_becomes_error_event_then_done() -> None:
    config = fake_config(fail_after_tokens=2)
    with running_gateway(config) as gw:
        response = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json={"model": "small", "stream": True, "messages": [{"role": "user", "content": "x"}]},
            headers={"authorization": f"Bearer {TEST_KEY}"},
        )
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert response.status_code == 200
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])
    assert error["error"]["code"] == "upstream_error"
    texts = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[1:-2]]
    assert len([t for t in texts if t]) == 2


def test_dead_tier_fails_over_along_the_chain() -> None:
    config = fake_config()
    config["engines"]["fake-large"]["options"] = {"dead": True}
    with running_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="large", messages=[{"role": "user", "content": "x"}]
        )
    assert raw.headers["x-tiergate-tier"] == "medium"
    assert raw.headers["x-tiergate-failover"] == "large->medium"


def test_an_engine_slower_than_the_request_timeout_is_504() -> None:
    config = fake_config(first_token_delay_s=2.0)
    config["server"] = {"request_timeout_s": 0.3}
    with running_gateway(config) as gw:
        response = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json={"model": "small", "messages": [{"role": "user", "content": "x"}]},
            headers={"authorization": f"Bearer {TEST_KEY}"},
        )
        engine = gw.state.parts.replicas["fake-small"][0].engine
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "upstream_timeout"
        assert engine.counters.aborted == 1 and engine.counters.active == 0
