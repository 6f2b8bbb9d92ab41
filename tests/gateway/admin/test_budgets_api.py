"""Budgets, downgrade, rate limits and the admin API through a real uvicorn and real Redis."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import pytest

from backends.base import GenerationRequest
from gateway.chat.protocol import ChatCompletionRequest, to_generation
from gateway.money.spend import prompt_upper_tokens, worst_cases
from policies.schema import GatewayConfig
from policies.stores.spending import tenant_scopes
from tests.gateway.budget_support import ADMIN_KEY, BudgetProbe, budget_config, redis_prefix
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import running_gateway
from tiergate_testing.net import free_port

HI = [{"role": "user", "content": "hi"}]
SMALL_COST = (1 * 0.1 + 8 * 0.2) / 1e6  # "hi" is one word to the fake, which answers 8
NAMES = ("keycap", "downer", "limited", "broke", "flaky", "tokens")
KEYS = {name: f"tg-{name}-key-0123456789" for name in NAMES}


def generation(model: str) -> GenerationRequest:
    return to_generation(ChatCompletionRequest(model=model, messages=HI, max_tokens=8))  # type: ignore[arg-type]


def tenant(name: str, **policy: Any) -> dict[str, Any]:
    key: dict[str, Any] = {"id": f"{name}-1", "from_env": f"TIERGATE_KEY_{name.upper()}"}
    key.update(policy.pop("key", {}))
    return {"keys": [key], **policy}


def estimate(config: GatewayConfig) -> int:
    """What the token rate limit counts for one request at admission (prompt + cap)."""
    return prompt_upper_tokens(config, generation("small")) + 8


def worst(config: GatewayConfig, tier: str) -> float:
    return worst_cases(config, [tier], generation(tier), None)[0].usd


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[Any, GatewayConfig, BudgetProbe]]:
    for name, key in KEYS.items():
        os.environ[f"TIERGATE_KEY_{name.upper()}"] = key
    os.environ["TIERGATE_ADMIN_KEY"] = ADMIN_KEY
    with redis_prefix() as prefix:
        raw = budget_config(prefix)
        base = GatewayConfig.model_validate(raw)
        small, medium, large = (worst(base, t) for t in ("small", "medium", "large"))
        raw["tenants"] = {
            "keycap": tenant(
                "keycap",
                budget={"limit_usd": 100.0},
                key={"budget": {"limit_usd": small + SMALL_COST / 2}},
            ),
            "downer": tenant(
                "downer",
                budget={"limit_usd": (medium + large) / 2},
                on_budget_exceeded="downgrade",
            ),
            "limited": tenant("limited", rate_limit={"requests_per_minute": 2}),
            "broke": tenant("broke", budget={"limit_usd": 0.0, "window": "monthly"}),
            "flaky": tenant("flaky", budget={"limit_usd": 1.0}),
            "tokens": tenant("tokens", rate_limit={"tokens_per_minute": estimate(base) + 20}),
        }
        config = GatewayConfig.model_validate(raw)
        with running_gateway(config) as gateway:
            try:
                yield gateway, config, BudgetProbe(prefix)
            finally:
                close_clients()


# Every client stays referenced until its gateway stops, then is closed: a client that
# the GC collects first would leave an unclosed socket (a ResourceWarning, an error here).
_CLIENTS: list[openai.OpenAI] = []


def client(gateway: Any, name: str) -> openai.OpenAI:
    made = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=KEYS[name], max_retries=0)
    _CLIENTS.append(made)
    return made


def close_clients() -> None:
    while _CLIENTS:
        _CLIENTS.pop().close()


def test_a_spent_key_is_refused_without_touching_its_tenant(setup: Any) -> None:
    gateway, config, probe = setup
    scopes = tenant_scopes(config, "keycap")
    api = client(gateway, "keycap")
    api.chat.completions.create(model="small", messages=HI, max_tokens=8)  # type: ignore[arg-type]
    before = probe.status(scopes)
    assert before["tenant:keycap"].spent_usd > 0
    # The SDK's own retries on: a final refusal says x-should-retry: false, so it asks once.
    retrying = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=KEYS["keycap"])
    _CLIENTS.append(retrying)
    with pytest.raises(openai.RateLimitError) as caught:
        retrying.chat.completions.create(model="small", messages=HI, max_tokens=8)  # type: ignore[arg-type]
    assert caught.value.code == "insufficient_quota"
    assert caught.value.status_code == 429
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert probe.status(scopes) == before
    assert probe.holds() == 0
    denied = [e for e in probe.events() if e.tenant == "keycap" and e.kind == "denied"]
    assert [e.status for e in denied] == ["budget"]


def test_near_its_limit_a_tenant_is_downgraded_and_saves(setup: Any) -> None:
    gateway, _, probe = setup
    raw = client(gateway, "downer").chat.completions.with_raw_response.create(
        model="large",
        messages=HI,  # type: ignore[arg-type]
        max_tokens=8,
    )
    assert raw.headers["x-tiergate-downgraded"] == "large->medium"
    assert raw.headers["x-tiergate-tier"] == "medium"
    assert raw.headers["x-tiergate-model"] == "fake-medium"
    assert raw.parse().usage.completion_tokens == 8  # type: ignore[union-attr]
    (event,) = [e for e in probe.events() if e.tenant == "downer"]
    assert event.downgraded and event.tier == "medium"
    assert event.cost_usd == pytest.approx((1 * 1.0 + 8 * 2.0) / 1e6)
    assert event.saved_routing_usd == pytest.approx((1 * 9.0 + 8 * 18.0) / 1e6)
    assert float(raw.headers["x-tiergate-cost-usd"]) == pytest.approx(event.cost_usd)


def test_rate_limit_refuses_with_openai_headers(setup: Any) -> None:
    gateway, _, probe = setup
    headers = {"authorization": f"Bearer {KEYS['limited']}"}
    body = {"model": "small", "messages": HI, "max_tokens": 4}
    with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=10) as http:
        first = http.post("/v1/chat/completions", json=body)
        assert first.status_code == 200
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        assert http.post("/v1/chat/completions", json=body).status_code == 200
        third = http.post("/v1/chat/completions", json=body)
    assert third.status_code == 429
    assert third.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(third.headers["retry-after"]) <= 60
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    assert third.headers["x-ratelimit-reset-requests"].endswith("s")
    statuses = [e.status for e in probe.events() if e.tenant == "limited"]
    assert sorted(statuses) == ["ok", "ok", "rate_limit"]


def test_tokens_per_minute_count_real_usage_once_known(setup: Any) -> None:
    gateway, config, _ = setup
    limit = estimate(config) + 20
    headers = {"authorization": f"Bearer {KEYS['tokens']}"}
    body = {"model": "small", "messages": HI, "max_tokens": 8}
    with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=10) as http:
        first = http.post("/v1/chat/completions", json=body)
        assert first.status_code == 200
        assert first.headers["x-ratelimit-limit-tokens"] == str(limit)
        assert first.headers["x-ratelimit-remaining-tokens"] == "20"
        # Settled: 9 real tokens (1 in, 8 out) replace the estimate, so a second fits.
        second = http.post("/v1/chat/completions", json=body)
        assert second.status_code == 200, second.text
        assert second.headers["x-ratelimit-remaining-tokens"] == str(20 - 9)
        third = http.post("/v1/chat/completions", json=body)
        assert third.headers["x-ratelimit-remaining-tokens"] == str(20 - 2 * 9)
        fourth = http.post("/v1/chat/completions", json=body)  # 27 real + one estimate
    assert fourth.status_code == 429
    assert fourth.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(fourth.headers["retry-after"]) <= 60


def test_a_disconnected_stream_settles_what_was_generated(setup: Any) -> None:
    gateway, config, probe = setup
    # A slow engine, so the client leaves mid-stream.
    for replica in gateway.state.parts.replicas["fake-small"]:
        replica.engine.token_delay_s = 0.1
    try:
        api = client(gateway, "keycap")
        api_scopes = tenant_scopes(config, "keycap")
        spent_before = probe.status(api_scopes)["key:keycap:keycap-1"].spent_usd
        # The key is spent; raise its cap at run time through the admin API first.
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        put = httpx.put(
            gateway.base_url + "/admin/api/budgets",
            headers=admin,
            json={"scope": "key", "tenant": "keycap", "key_id": "keycap-1", "limit_usd": 1.0},
        )
        assert put.status_code == 200, put.text
        stream = api.chat.completions.create(
            model="small",
            messages=HI,  # type: ignore[arg-type]
            stream=True,
        )
        seen = 0
        for chunk in stream:
            seen += sum(1 for c in chunk.choices if c.delta.content)
            if seen == 2:
                break
        stream.close()
        assert probe.wait_no_holds() == 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            cancelled = [e for e in probe.events() if e.status == "cancelled"]
            if cancelled:
                break
            time.sleep(0.05)
        (event,) = cancelled
        assert 2 <= event.completion_tokens < 8
        spent = probe.status(api_scopes)["key:keycap:keycap-1"].spent_usd
        assert spent - spent_before == pytest.approx(event.cost_usd, abs=1e-9)
    finally:
        for replica in gateway.state.parts.replicas["fake-small"]:
            replica.engine.token_delay_s = 0.0


def test_an_engine_failing_mid_stream_settles_what_it_generated(setup: Any) -> None:
    gateway, config, probe = setup
    for replica in gateway.state.parts.replicas["fake-medium"]:
        replica.engine.fail_after_tokens = 3
    try:
        stream = client(gateway, "flaky").chat.completions.create(
            model="medium",
            messages=HI,  # type: ignore[arg-type]
            max_tokens=8,
            stream=True,
        )
        parts: list[str] = []
        with pytest.raises(openai.APIError, match="the model failed while generating"):
            for chunk in stream:
                parts += [c.delta.content or "" for c in chunk.choices]
        text = "".join(parts)
        assert len(text.split()) == 3
    finally:
        for replica in gateway.state.parts.replicas["fake-medium"]:
            replica.engine.fail_after_tokens = None
    assert probe.wait_no_holds() == 0
    deadline = time.monotonic() + 5
    while not (events := [e for e in probe.events() if e.tenant == "flaky"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (event,) = events
    prompt_upper = worst_cases(config, ["medium"], generation("medium"), None)[0].prompt_tokens
    assert (event.status, event.completion_tokens) == ("error", 3)
    assert event.prompt_tokens == prompt_upper  # no usage came back: the safe estimate
    assert event.cost_usd == pytest.approx((prompt_upper * 1.0 + 3 * 2.0) / 1e6)
    spent = probe.status(tenant_scopes(config, "flaky"))["tenant:flaky"].spent_usd
    assert spent == pytest.approx(event.cost_usd, abs=1e-9)


def test_admin_lists_sets_and_reports_spend(setup: Any) -> None:
    gateway, _, _ = setup
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=gateway.base_url, headers=admin, timeout=10) as http:
        with pytest.raises(openai.RateLimitError):
            client(gateway, "broke").chat.completions.create(
                model="small",
                messages=HI,  # type: ignore[arg-type]
                max_tokens=8,
            )
        bad = http.put("/admin/api/budgets", json={"scope": "tenant", "limit_usd": -1})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit_usd"
        # A cap too large for the store's nano-dollar integers is a 400 too, and sets nothing
        # (it was a 500 on the next read: the fuzz test found it).
        huge = http.put("/admin/api/budgets", json={"tenant": "broke", "limit_usd": 1e300})
        assert huge.status_code == 400 and huge.json()["error"]["param"] == "limit_usd"
        assert http.get("/admin/api/budgets").status_code == 200
        no_tenant = http.put("/admin/api/budgets", json={"scope": "tenant", "limit_usd": 1})
        assert no_tenant.status_code == 400
        assert "tenant is required" in no_tenant.json()["error"]["message"]
        missing = http.put("/admin/api/budgets", json={"tenant": "nobody", "limit_usd": 1})
        assert missing.status_code == 404
        assert http.put("/admin/api/budgets", json={"tenant": "broke", "limit_usd": 1}).is_success
        client(gateway, "broke").chat.completions.create(
            model="small",
            messages=HI,  # type: ignore[arg-type]
            max_tokens=8,
        )
        listing = http.get("/admin/api/budgets").json()
        broke = next(t for t in listing["tenants"] if t["tenant"] == "broke")
        assert broke["limit_usd"] == 1.0 and broke["window"] == "daily" and broke["overridden"]
        assert broke["spent_usd"] == pytest.approx((1 * 0.1 + 8 * 0.2) / 1e6, abs=1e-9)
        assert broke["remaining_usd"] == pytest.approx(1.0 - broke["spent_usd"])
        assert broke["keys"][0]["key_id"] == "broke-1"
        today = datetime.now(UTC).date().isoformat()
        spend = http.get("/admin/api/budgets/spend", params={"tenant": "broke"}).json()
        (row,) = [r for r in spend["days"] if r["day"] == today]
        assert row["requests"] == 1 and row["denied_budget"] == 1
        assert row["cost_usd"] == pytest.approx(broke["spent_usd"], abs=1e-9)
        assert http.get("/admin/api/budgets/spend", params={"start": "x"}).status_code == 400
        assert http.put("/admin/api/budgets", json={"tenant": "broke", "reset": True}).is_success
        tenant_key = {"authorization": f"Bearer {KEYS['broke']}"}
        assert http.get("/admin/api/budgets", headers=tenant_key).status_code == 403


def test_unreachable_store_fails_closed_unless_the_tenant_fails_open() -> None:
    os.environ["TIERGATE_KEY_OPEN"] = "tg-open-key-0123456789"
    os.environ["TIERGATE_KEY_SHUT"] = "tg-shut-key-0123456789"
    raw = budget_config("tgtest-down")
    raw["redis_url"] = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    raw["tenants"] = {
        "shut": tenant("shut", budget={"limit_usd": 1.0}),
        "open": tenant(
            "open",
            budget={"limit_usd": 1.0},
            rate_limit={"requests_per_minute": 5},
            budget_fail_open=True,
            rate_limit_fail_open=True,
        ),
    }
    body = {"model": "small", "messages": HI, "max_tokens": 4}
    with running_gateway(raw) as gateway:
        url = gateway.base_url + "/v1/chat/completions"
        shut = httpx.post(
            url, json=body, headers={"authorization": "Bearer tg-shut-key-0123456789"}
        )
        assert shut.status_code == 503
        assert shut.json()["error"]["code"] == "budget_unavailable"
        open_ = httpx.post(
            url, json=body, headers={"authorization": "Bearer tg-open-key-0123456789"}
        )
        assert open_.status_code == 200, open_.text


def test_single_process_mode_keeps_the_same_budget_contract() -> None:
    """No Redis: the in-process stores reserve, downgrade and settle the same way."""
    os.environ["TIERGATE_KEY_SOLO"] = "tg-solo-key-0123456789"
    raw = fake_config()
    base = GatewayConfig.model_validate(raw)
    medium, large = worst(base, "medium"), worst(base, "large")
    raw["tenants"] = {
        "solo": tenant(
            "solo", budget={"limit_usd": (medium + large) / 2}, on_budget_exceeded="downgrade"
        )
    }
    with running_gateway(raw) as gateway:
        assert gateway.state.parts.store.kind == "memory"
        api = openai.OpenAI(
            base_url=gateway.base_url + "/v1", api_key="tg-solo-key-0123456789", max_retries=0
        )
        _CLIENTS.append(api)
        raw_reply = api.chat.completions.with_raw_response.create(
            model="large",
            messages=HI,  # type: ignore[arg-type]
            max_tokens=8,
        )
        assert raw_reply.headers["x-tiergate-downgraded"] == "large->medium"
        state = gateway.state
        (status,) = [
            s
            for s in gateway.call(
                state.parts.money.budgets.status(tenant_scopes(state.config, "solo"))
            )
            if s.scope == "tenant:solo"
        ]
        assert status.held_usd == 0 and status.spent_usd == pytest.approx(17 / 1e6)
        events = gateway.call(state.parts.money.ledger.events(time.time() - 60, time.time() + 60))
        assert [(e.tier, e.downgraded) for e in events] == [("medium", True)]
        close_clients()


def test_a_request_longer_than_the_ttl_keeps_its_hold() -> None:
    """Holds lapse only when their replica stops beating, never under a live request."""
    os.environ["TIERGATE_KEY_LONG"] = "tg-long-key-0123456789"
    with redis_prefix() as prefix:
        raw = budget_config(prefix, token_delay_s=0.25)
        raw["budgets"] = {"reservation_ttl_s": 0.6}
        raw["tenants"] = {"long": tenant("long", budget={"limit_usd": 1.0})}
        probe = BudgetProbe(prefix)
        with running_gateway(raw) as gateway:
            api = openai.OpenAI(
                base_url=gateway.base_url + "/v1", api_key="tg-long-key-0123456789", max_retries=0
            )
            _CLIENTS.append(api)
            started = time.monotonic()
            stream = api.chat.completions.create(
                model="small",
                messages=HI,  # type: ignore[arg-type]
                max_tokens=8,
                stream=True,
            )
            holds_seen = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    holds_seen.append((time.monotonic() - started, probe.holds()))
            assert holds_seen[-1][0] > 3 * 0.6  # the stream outlived the TTL three times over
            # (After the last token the request may already have settled.)
            assert all(held == 1 for _, held in holds_seen[:-1]), holds_seen
            assert probe.wait_no_holds() == 0
            status = probe.status(tenant_scopes(gateway.state.config, "long"))["tenant:long"]
            assert status.spent_usd == pytest.approx(SMALL_COST, abs=1e-9)
            close_clients()
