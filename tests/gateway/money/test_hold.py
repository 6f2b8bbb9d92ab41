"""The money handle on the in-process stores (the same contract as Redis's: the budget
contract tests run both): one ``Hold`` reserves, keeps the hold alive, caps the run and
settles exactly once, whichever way the request ends. The hold never asks its request
anything: the request computes its one outcome and hands it over."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace

import pytest

from backends.base import Usage
from gateway.errors import InsufficientQuota, RateLimited
from gateway.money.hold import Hold, Money, refusal
from gateway.money.outcome import embedding_outcome
from gateway.money.spend import WorstCase
from gateway.types import Outcome
from policies.schema import GatewayConfig
from policies.stores.factories import open_budget_store, open_ledger, open_rate_limiter, open_store
from policies.stores.ledger import SpendEvent
from policies.stores.settle_journal import SettleJournal
from policies.stores.spending import tenant_scopes
from policies.tenants import KeyRing, Principal
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config

MODEL = "fake-small"  # 0.1 USD per million input tokens


@dataclass(frozen=True, slots=True)
class Call:
    request_id: str
    principal: Principal
    metadata: Mapping[str, str] | None = None


def outcome(
    config: GatewayConfig, tokens: int, error: str | None, denied: str | None = None
) -> Outcome:
    """A request's one outcome, as the runs compute it and hand it to their hold."""
    usage = Usage(tokens if error is None else 0, 0)
    return embedding_outcome(config, MODEL, usage, error=error, denied=denied, latency_s=0.01)


@dataclass
class Fixture:
    config: GatewayConfig
    money: Money
    principal: Principal

    def hold(self, usd: float, tokens: int, rid: str = "") -> Hold:
        call = Call(rid or f"req-{os.urandom(4).hex()}", self.principal)
        worst = [WorstCase("small", usd, tokens, 0)]
        return Hold(self.money, self.config, call, worst, tokens)

    async def spent(self) -> float:
        scopes = tenant_scopes(self.config, "acme")
        (status,) = [s for s in await self.money.budgets.status(scopes) if s.scope == "tenant:acme"]
        return status.spent_usd

    async def events(self) -> list[SpendEvent]:
        return await self.money.ledger.events(time.time() - 60, time.time() + 60)


@pytest.fixture
async def money() -> AsyncIterator[Fixture]:
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    os.environ.setdefault("TIERGATE_OTHER_KEY", OTHER_KEY)
    raw = fake_config()
    raw["tenants"]["acme"]["budget"] = {"limit_usd": 0.001, "window": "daily"}
    raw["tenants"]["acme"]["rate_limit"] = {"requests_per_minute": 5}
    config = GatewayConfig.model_validate(raw)
    store = open_store(config)
    ledger = open_ledger(config, store)
    budgets = open_budget_store(config, store, ledger)
    journal = SettleJournal(budgets, None)
    journal.open()
    principal = KeyRing.from_config(config).authenticate(TEST_KEY)
    assert principal is not None
    money = Money(budgets, open_rate_limiter(config, store), journal, ledger, set())
    yield Fixture(config, money, principal)
    journal.close()
    await store.aclose()


async def test_one_handle_reserves_then_settles_what_the_request_came_to(
    money: Fixture,
) -> None:
    hold = money.hold(0.0005, 2000)  # 2000 tokens: 0.0002 USD at fake-small's price
    await hold.open()
    assert hold.ticket is not None and hold.ticket.held.reservation is not None
    assert await money.money.budgets.active_holds() == 1
    assert hold.run_cap("small", None) == hold.ticket.completion_cap
    assert dict(hold.headers)["x-ratelimit-limit-requests"] == "5"
    finished = outcome(money.config, 2000, None)  # the request finished
    await hold.close(finished)
    assert await money.money.budgets.active_holds() == 0
    assert await money.spent() == pytest.approx(0.0002)
    (event,) = await money.events()
    assert (event.status, event.cost_usd) == ("ok", pytest.approx(0.0002))
    await hold.close(outcome(money.config, 0, "cancelled"))  # closing again settles nothing more
    assert await money.spent() == pytest.approx(0.0002)
    assert len(await money.events()) == 1


async def test_a_refusal_is_recorded_once_and_nothing_is_held(money: Fixture) -> None:
    hold = money.hold(0.01, 100_000)  # ten times the daily budget
    with pytest.raises(InsufficientQuota) as refused:
        await hold.open()
    error, denied = refusal(refused.value)
    assert (error, denied) == ("insufficient_quota", "budget")
    # final: no hold in flight could make room, so the SDKs are told not to retry
    assert refused.value.headers.get("x-should-retry") == "false"
    assert "Retry-After" not in refused.value.headers
    await hold.close(outcome(money.config, 0, error, denied))  # the request's own close
    await hold.close(outcome(money.config, 0, "cancelled"))  # and again: a no-op
    assert await money.money.budgets.active_holds() == 0
    (event,) = await money.events()
    assert (event.kind, event.status) == ("denied", "budget")
    assert await money.spent() == 0.0


async def test_the_rate_limit_refuses_before_any_reservation(money: Fixture) -> None:
    for _ in range(5):
        hold = money.hold(0.00001, 10)
        await hold.open()
        await hold.close(outcome(money.config, 10, None))
    sixth = money.hold(0.00001, 10)
    with pytest.raises(RateLimited) as refused:
        await sixth.open()  # a sixth request in the minute is not admitted
    assert refusal(refused.value)[1] == "rate_limit"
    await sixth.close(outcome(money.config, 0, *refusal(refused.value)))
    assert sixth.ticket is None
    assert [e.status for e in await money.events() if e.kind == "denied"] == ["rate_limit"]


async def test_a_cancelled_request_still_settles(money: Fixture) -> None:
    entered = asyncio.Event()

    async def request() -> None:
        hold = money.hold(0.0005, 2000)
        await hold.open()
        try:
            entered.set()
            await asyncio.sleep(30)  # the client leaves meanwhile
        finally:
            await hold.close(outcome(money.config, 0, "cancelled"))

    task = asyncio.create_task(request())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await money.money.budgets.active_holds() == 0
    (event,) = await money.events()
    assert event.status == "cancelled" and event.cost_usd == 0.0


async def test_the_heartbeat_keeps_a_long_request_s_hold_and_stops_at_close(
    money: Fixture,
) -> None:
    """Held past twice its TTL while the request runs; no beat after the close."""
    budgets = type(money.money.budgets)(money.money.ledger, ttl_s=0.3)  # type: ignore[call-arg]
    config = money.config.model_copy(
        update={"budgets": money.config.budgets.model_copy(update={"reservation_ttl_s": 0.3})}
    )
    beats = 0
    extend = budgets.extend

    async def counted(reservation: object) -> bool:
        nonlocal beats
        beats += 1
        return await extend(reservation)  # type: ignore[arg-type]

    budgets.extend = counted  # type: ignore[method-assign]
    journal = SettleJournal(budgets, None)
    journal.open()
    fixture = Fixture(
        config, replace(money.money, budgets=budgets, journal=journal), money.principal
    )
    hold = fixture.hold(0.0005, 2000)
    await hold.open()
    await asyncio.sleep(0.75)  # 2.5 TTLs: lapsed without its beats
    assert beats >= 5 and await budgets.active_holds() == 1
    await hold.close(outcome(config, 2000, None))
    settled = beats
    await asyncio.sleep(0.3)
    assert beats == settled and await budgets.active_holds() == 0
    assert await fixture.spent() == pytest.approx(0.0002)
    journal.close()
