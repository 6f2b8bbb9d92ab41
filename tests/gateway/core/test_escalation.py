"""Escalation through a real uvicorn and the official client: the cheap tier answers
first, its answer is judged by its token log-probabilities (the fake returns them as
llama.cpp does) and kept or re-asked one tier up; the client sees one answer, the
headers, ``/v1/route``, the ledger and the metrics say which way it went; both attempts
are held against the budget before the first runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from policies.stores.budget import GLOBAL_SCOPE, Scope, tenant_scope
from policies.stores.ledger import SpendEvent
from tests.gateway.ledger_seed import ADMIN_KEY, admin_config
from tests.redis_servers import RedisProcess
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, concurrent_chats, running_gateway

EASY = [{"role": "user", "content": "Say hi."}]
HARD = [{"role": "user", "content": "A hard multi-step problem."}]
PRICES = {  # output only: a request's worst case at max_tokens=8 is what it is charged
    "fake-small": {"input": 0.0, "output": 0.2},
    "fake-medium": {"input": 0.0, "output": 2.0},
    "fake-large": {"input": 0.0, "output": 20.0},
}
SMALL, MEDIUM = 8 * 0.2 / 1e6, 8 * 2.0 / 1e6  # eight tokens on each


def escalating(**engine: Any) -> dict[str, Any]:
    raw = fake_config(logprob_rules=[{"when": "hard", "logprob": -4.0}], **engine)
    raw["prices"] = PRICES
    raw["tenants"]["acme"]["escalation"] = {"mode": "always"}  # small first, then medium
    return raw


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with running_gateway(admin_config(escalating())) as running:
        yield running


@pytest.fixture(scope="module")
def client(gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def ask(client: openai.OpenAI, messages: Any, **extra: Any) -> tuple[Any, httpx.Headers]:
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=messages, max_tokens=8, **extra
    )
    return raw.parse(), raw.headers


def direct(client: openai.OpenAI, tier: str, messages: Any) -> str:
    answer = client.chat.completions.create(model=tier, messages=messages, max_tokens=8)
    return answer.choices[0].message.content or ""


def test_a_confident_cheap_answer_is_kept(client: openai.OpenAI) -> None:
    answer, headers = ask(client, EASY)
    assert headers["x-tiergate-escalated"] == "false" and headers["x-tiergate-tier"] == "small"
    assert answer.choices[0].message.content == direct(client, "small", EASY)
    assert answer.choices[0].logprobs is None  # the judge's, not the client's
    assert float(headers["x-tiergate-cost-usd"]) == pytest.approx(SMALL)


def test_a_weak_cheap_answer_is_reasked_one_tier_up(client: openai.OpenAI) -> None:
    answer, headers = ask(client, HARD)
    assert headers["x-tiergate-escalated"] == "true" and headers["x-tiergate-tier"] == "medium"
    assert answer.choices[0].message.content == direct(client, "medium", HARD)
    # both attempts are charged: the client's one answer cost the small one too
    assert float(headers["x-tiergate-cost-usd"]) == pytest.approx(SMALL + MEDIUM)


def test_streams_hold_the_cheap_attempt_until_the_verdict(client: openai.OpenAI) -> None:
    for messages, escalated, tier in ((EASY, "false", "small"), (HARD, "true", "medium")):
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=messages, max_tokens=8, stream=True
        )
        assert raw.headers["x-tiergate-escalated"] == escalated
        assert raw.headers["x-tiergate-tier"] == tier
        text = "".join(
            event.choices[0].delta.content or "" for event in raw.parse() if event.choices
        )
        assert text == direct(client, tier, messages)


def test_logprobs_reach_a_client_that_asked(client: openai.OpenAI) -> None:
    answer, headers = ask(client, EASY, logprobs=True)
    assert headers["x-tiergate-escalated"] == "false"
    entries = answer.choices[0].logprobs.content
    assert len(entries) == 8 and all(-0.15 < e.logprob <= -0.1 for e in entries)


def test_named_tiers_and_tools_are_not_escalated(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="small", messages=HARD, max_tokens=8
    )
    assert "x-tiergate-escalated" not in raw.headers and raw.headers["x-tiergate-tier"] == "small"


def test_route_ledger_and_metrics_say_so(gateway: RunningGateway, client: openai.OpenAI) -> None:
    auth = {"authorization": f"Bearer {TEST_KEY}"}
    shown = httpx.post(gateway.base_url + "/v1/route", json={"messages": HARD}, headers=auth).json()
    assert shown["escalation"] == {
        "first": "small",
        "then": "medium",
        "reason": "tenant policy: always",
        "signal": "quantile",
        "quantile": 0.1,
        "threshold": -2.5,
    }
    assert any(step.startswith("escalation: small answers first") for step in shown["trail"])
    ask(client, EASY, seed=7)  # one kept
    _, headers = ask(client, HARD, seed=7)
    request_id = headers["x-request-id"]
    ledger = gateway.state.parts.money.ledger
    event = wait_for_event(gateway, request_id)
    assert event.judged and event.escalated and event.attempts == 2
    assert event.escalation_added_usd == pytest.approx(SMALL)
    assert event.cost_usd == pytest.approx(SMALL + MEDIUM)
    assert SpendEvent.from_fields(event.to_fields()) == event  # what Redis keeps
    assert ledger is not None
    metrics = httpx.get(gateway.base_url + "/metrics").text
    assert 'tiergate_escalations_total{result="escalated",tier="medium"}' in metrics
    assert 'tiergate_escalations_total{result="kept",tier="small"}' in metrics
    assert 'tiergate_escalation_added_usd_total{tier="medium"}' in metrics


def test_the_dashboard_counts_judged_kept_and_reasked(
    gateway: RunningGateway, client: openai.OpenAI
) -> None:
    ids = [
        ask(client, messages, seed=20 + i)[1]["x-request-id"]
        for i, messages in enumerate((EASY, HARD, HARD))
    ]
    events = [wait_for_event(gateway, request_id) for request_id in ids]
    assert [e.escalated for e in events] == [False, True, True]
    everything = gateway.call(gateway.state.parts.money.ledger.events(0, time.time() + 60))
    judged = [e for e in everything if e.judged]
    auth = {"authorization": f"Bearer {ADMIN_KEY}"}
    tile = httpx.get(gateway.base_url + "/admin/api/overview", headers=auth).json()["escalation"]
    escalated = sum(e.escalated for e in judged)
    assert tile == {
        "judged": len(judged),
        "kept": len(judged) - escalated,
        "escalated": escalated,
        "rate": pytest.approx(escalated / len(judged)),
        "added_usd": pytest.approx(escalated * SMALL),
    }


def wait_for_event(gateway: RunningGateway, request_id: str) -> SpendEvent:
    ledger = gateway.state.parts.money.ledger
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        events = gateway.call(ledger.events(0, time.time() + 60))
        found = [e for e in events if e.request_id == request_id]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no ledger event for {request_id}")


def budget_config(redis_url: str, limit_usd: float) -> dict[str, Any]:
    raw = escalating(first_token_delay_s=0.3, token_delay_s=0.02)
    raw["redis_url"] = redis_url
    raw["redis_timeout_s"] = 5.0
    raw["tenants"]["acme"]["budget"] = {"limit_usd": limit_usd, "window": "total"}
    return raw


def held_and_spent(gateway: RunningGateway) -> tuple[float, float, int]:
    budgets = gateway.state.parts.money.budgets
    status = gateway.call(
        budgets.status([Scope(GLOBAL_SCOPE, None), Scope(tenant_scope("acme"), None)])
    )
    (row,) = [s for s in status if s.scope == tenant_scope("acme")]
    return row.spent_usd, row.held_usd, gateway.call(budgets.active_holds())


def test_thirty_escalations_on_a_budget_for_ten_never_overspend() -> None:
    server = RedisProcess()
    server.start()
    try:
        budget = 10 * (SMALL + MEDIUM)
        with running_gateway(budget_config(server.url, budget)) as gateway:
            results = asyncio.run(
                concurrent_chats([gateway.base_url], 30, model="auto", messages=HARD, max_tokens=8)
            )
            answered = [r for r in results if not isinstance(r, openai.APIStatusError)]
            refused = [r for r in results if isinstance(r, openai.APIStatusError)]
            assert all(r.status_code == 429 for r in refused)
            assert all(r.model == "fake-medium" for r in answered)  # every one escalated
            deadline = time.monotonic() + 10
            while held_and_spent(gateway)[1] > 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            spent, held, holds = held_and_spent(gateway)
            assert spent <= budget + 1e-12 and held == 0 and holds == 0
            assert len(answered) == 10 and len(refused) == 20
            print(
                f"\n30 escalating on a budget for 10: {len(answered)} answered (escalated), "
                f"{len(refused)} refused 429; spent ${spent:.9f} of ${budget:.9f}, held 0"
            )
    finally:
        server.stop()


def test_a_budget_for_one_attempt_runs_the_routers_tier_alone() -> None:
    server = RedisProcess()
    server.start()
    try:
        with running_gateway(budget_config(server.url, SMALL + MEDIUM / 2)) as gateway:
            client = openai.OpenAI(
                base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0
            )
            answer, headers = ask(client, HARD)
            assert "x-tiergate-escalated" not in headers and headers["x-tiergate-tier"] == "small"
            assert answer.model == "fake-small"
    finally:
        server.stop()


def test_a_client_gone_during_the_cheap_attempt_pays_what_it_generated() -> None:
    with running_gateway(escalating(token_delay_s=0.1)) as gateway:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                gateway.base_url + "/v1/chat/completions",
                json={"model": "auto", "messages": HARD, "max_tokens": 8},
                headers={"authorization": f"Bearer {TEST_KEY}"},
                timeout=0.45,  # about four of the cheap tier's eight tokens
            )
        ledger = gateway.state.parts.money.ledger
        deadline = time.monotonic() + 10
        events: list[SpendEvent] = []
        while not events and time.monotonic() < deadline:
            events = gateway.call(ledger.events(0, time.time() + 60))
            time.sleep(0.05)
        (event,) = events
        assert event.status == "cancelled" and event.tier == "small"
        assert 1 <= event.completion_tokens < 8
        assert event.cost_usd == pytest.approx(event.completion_tokens * 0.2 / 1e6)


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"tools": [TOOL]}, "escalation: not for tools"),
        ({"model": "medium"}, "escalation: not for a named model or a forced tier"),
    ],
)
def test_what_never_escalates_says_why(extra: dict[str, Any], why: str) -> None:
    # (response_format: the fake has none; test_escalation_llamacpp.py)
    with running_gateway(escalating(tools=True)) as gateway:
        body = {"model": "auto", "messages": EASY, **extra}
        auth = {"authorization": f"Bearer {TEST_KEY}"}
        shown = httpx.post(gateway.base_url + "/v1/route", json=body, headers=auth).json()
        assert shown["escalation"] is None and why in shown["trail"], shown


def test_tokens_per_minute_counts_both_attempts() -> None:
    raw = escalating()
    raw["tenants"]["acme"]["rate_limit"] = {"tokens_per_minute": 100_000}
    with running_gateway(raw) as gateway:
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
        first, headers = ask(client, HARD)
        assert headers["x-tiergate-escalated"] == "true" and first.usage is not None
        before = int(headers["x-ratelimit-remaining-tokens"])  # less its own estimate
        time.sleep(0.3)  # settled: its estimate corrected to what both attempts used
        _, again = ask(client, HARD)
        # the same request again: the window holds the first one's real tokens (both
        # attempts: the cheap one used as many as the answer here) where its estimate was
        left = int(again["x-ratelimit-remaining-tokens"])
        estimate = 100_000 - before
        assert left == 100_000 - 2 * first.usage.total_tokens - estimate
