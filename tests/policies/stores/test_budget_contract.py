"""One contract for both budget stores: the Redis one against the real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from policies.schema import BudgetSpec
from policies.stores.budget import (
    GLOBAL_SCOPE,
    BudgetStore,
    Denied,
    Reservation,
    Scope,
    key_scope,
    tenant_scope,
)
from policies.stores.budget_memory import MemoryBudgetStore
from policies.stores.budget_redis import RedisBudgetStore
from policies.stores.ledger import Ledger, MemoryLedger, SpendEvent
from policies.stores.ledger_redis import RedisLedger
from tests.redis_servers import REDIS7_URL, redis_store


@dataclass
class Backend:
    budgets: BudgetStore
    ledger: Ledger


@pytest.fixture(params=["memory", "redis", "cluster"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        ledger = MemoryLedger()
        yield Backend(MemoryBudgetStore(ledger, ttl_s=30), ledger)
        return
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    async with redis_store(url, cluster=cluster) as store:
        redis_ledger = RedisLedger(store)
        yield Backend(RedisBudgetStore(redis_ledger, ttl_s=30), redis_ledger)


def scopes(tenant_usd: float | None, key_usd: float | None = None) -> list[Scope]:
    def spec(usd: float | None) -> BudgetSpec | None:
        return None if usd is None else BudgetSpec(limit_usd=usd, window="daily")

    return [
        Scope(GLOBAL_SCOPE, None),
        Scope(tenant_scope("acme"), spec(tenant_usd)),
        Scope(key_scope("acme", "k1"), spec(key_usd)),
    ]


def event(rid: str, cost: float) -> SpendEvent:
    return SpendEvent(
        ts=time.time(), request_id=rid, tenant="acme", key_id="k1", tier="small",
        model="m", cost_usd=cost,
    )  # fmt: skip


async def test_reserve_then_settle_charges_the_real_cost(backend: Backend) -> None:
    store = backend.budgets
    held = await store.reserve("r1", scopes(1.0), [0.4])
    assert isinstance(held, Reservation) and held.choice == 0
    status = {s.scope: s for s in await store.status(scopes(1.0))}
    assert status["tenant:acme"].held_usd == pytest.approx(0.4)
    assert status["tenant:acme"].remaining_usd == pytest.approx(0.6)
    assert await store.settle(held, 0.15, event("r1", 0.15))
    status = {s.scope: s for s in await store.status(scopes(1.0))}
    tenant = status["tenant:acme"]
    assert (tenant.spent_usd, tenant.held_usd) == (pytest.approx(0.15), 0.0)
    assert status[GLOBAL_SCOPE].spent_usd == pytest.approx(0.15)  # uncapped scopes still count
    assert await store.active_holds() == 0
    events = await backend.ledger.events(time.time() - 60, time.time() + 60)
    assert [(e.request_id, e.cost_usd) for e in events] == [("r1", 0.15)]


async def test_settle_is_idempotent_per_request_id(backend: Backend) -> None:
    store = backend.budgets
    held = await store.reserve("r1", scopes(1.0), [0.5])
    assert isinstance(held, Reservation)
    assert await store.settle(held, 0.5, event("r1", 0.5))
    assert not await store.settle(held, 0.5, event("r1", 0.5))
    # A retried request id reserves again; its settle charges nothing and frees the hold.
    again = await store.reserve("r1", scopes(1.0), [0.5])
    assert isinstance(again, Reservation)
    assert not await store.settle(again, 0.5, event("r1", 0.5))
    assert await store.active_holds() == 0
    (tenant,) = [s for s in await store.status(scopes(1.0)) if s.scope == "tenant:acme"]
    assert tenant.spent_usd == pytest.approx(0.5)
    assert len(await backend.ledger.events(time.time() - 60, time.time() + 60)) == 1


async def test_concurrent_reservations_never_exceed_the_cap(backend: Backend) -> None:
    store = backend.budgets
    results = await asyncio.gather(*(store.reserve(f"r{i}", scopes(1.0), [0.1]) for i in range(40)))
    held = [r for r in results if isinstance(r, Reservation)]
    assert len(held) == 10
    assert all(isinstance(r, Denied) and r.scope == "tenant:acme" for r in results if r not in held)


async def test_a_spent_key_denies_without_touching_the_tenant(backend: Backend) -> None:
    store = backend.budgets
    first = await store.reserve("r1", scopes(10.0, key_usd=1.0), [0.9])
    assert isinstance(first, Reservation)
    await store.settle(first, 0.9)
    before = await store.status(scopes(10.0, key_usd=1.0))
    denied = await store.reserve("r2", scopes(10.0, key_usd=1.0), [0.5])
    assert isinstance(denied, Denied) and denied.scope == "key:acme:k1"
    assert denied.remaining_usd == pytest.approx(0.1)
    assert await store.status(scopes(10.0, key_usd=1.0)) == before
    assert await store.active_holds() == 0


async def test_candidates_pick_the_most_capable_that_fits(backend: Backend) -> None:
    store = backend.budgets
    held = await store.reserve("r1", scopes(1.0), [0.7])
    assert isinstance(held, Reservation)
    choice = await store.reserve("r2", scopes(1.0), [0.5, 0.25, 0.01])
    assert isinstance(choice, Reservation)
    assert (choice.choice, choice.amount_usd) == (1, pytest.approx(0.25))
    denied = await store.reserve("r3", scopes(1.0), [0.5, 0.2])
    assert isinstance(denied, Denied) and denied.needed_usd == pytest.approx(0.2)


async def test_an_expired_hold_returns_its_money(backend: Backend) -> None:
    store = backend.budgets
    if isinstance(store, MemoryBudgetStore):
        # One process's store: the lost hold is one of its own, taken with a short TTL.
        store.ttl_s, ttl_s = 0.3, store.ttl_s
        lost = await store.reserve("dead-replica", scopes(1.0), [0.8])
        store.ttl_s = ttl_s
    else:
        assert isinstance(store, RedisBudgetStore)
        short = RedisBudgetStore(store.ledger, ttl_s=0.3)
        lost = await short.reserve("dead-replica", scopes(1.0), [0.8])
    assert isinstance(lost, Reservation)
    assert isinstance(await store.reserve("r2", scopes(1.0), [0.5]), Denied)
    await asyncio.sleep(0.4)
    assert await store.active_holds() == 0
    (tenant,) = [s for s in await store.status(scopes(1.0)) if s.scope == "tenant:acme"]
    assert (tenant.held_usd, tenant.remaining_usd) == (0.0, pytest.approx(1.0))
    assert isinstance(await store.reserve("r3", scopes(1.0), [0.5]), Reservation)
    # The replica comes back late and settles: the real cost is charged once.
    assert await store.settle(lost, 0.3)
    (tenant,) = [s for s in await store.status(scopes(1.0)) if s.scope == "tenant:acme"]
    assert tenant.spent_usd == pytest.approx(0.3) and tenant.held_usd == pytest.approx(0.5)


async def test_a_heartbeat_keeps_a_long_request_s_hold(backend: Backend) -> None:
    store = backend.budgets
    short: BudgetStore
    if isinstance(store, MemoryBudgetStore):
        short = MemoryBudgetStore(store.ledger, ttl_s=0.4)
    else:
        assert isinstance(store, RedisBudgetStore)
        short = RedisBudgetStore(store.ledger, ttl_s=0.4)
    held = await short.reserve("long", scopes(1.0), [0.8])
    assert isinstance(held, Reservation)
    for _ in range(4):  # 0.8 s in all: twice the TTL
        await asyncio.sleep(0.2)
        assert await short.extend(held)
    assert await short.active_holds() == 1
    assert await short.settle(held, 0.1)
    assert not await short.extend(held)  # settled: nothing left to extend
    lapsed = await short.reserve("lapsed", scopes(1.0), [0.1])
    assert isinstance(lapsed, Reservation)
    await asyncio.sleep(0.5)
    assert not await short.extend(lapsed)  # too late: the money was already released
    assert await short.active_holds() == 0


async def test_runtime_override_wins_and_reset_restores(backend: Backend) -> None:
    store = backend.budgets
    await store.set_limit("tenant:acme", BudgetSpec(limit_usd=0.05, window="monthly"))
    assert isinstance(await store.reserve("r1", scopes(1.0), [0.1]), Denied)
    (tenant,) = [s for s in await store.status(scopes(1.0)) if s.scope == "tenant:acme"]
    assert (tenant.limit_usd, tenant.window, tenant.overridden) == (
        pytest.approx(0.05), "monthly", True,
    )  # fmt: skip
    await store.set_limit("tenant:acme", None)
    assert isinstance(await store.reserve("r2", scopes(0.01), [5.0]), Reservation)
    await store.clear_limit("tenant:acme")
    assert isinstance(await store.reserve("r3", scopes(0.01), [0.1]), Denied)


async def test_uncapped_scopes_always_fit(backend: Backend) -> None:
    held = await backend.budgets.reserve("r1", scopes(None), [1e6])
    assert isinstance(held, Reservation) and held.amount_usd == pytest.approx(1e6)


async def test_a_fail_open_charge_counts_once_even_past_the_cap(backend: Backend) -> None:
    store = backend.budgets
    held = await store.reserve("r1", scopes(1.0), [0.8])
    assert isinstance(held, Reservation)
    # Ran while the store was down (no hold): the money is spent, cap or no cap.
    assert await store.charge("open-1", scopes(1.0), 0.5, event("open-1", 0.5))
    assert not await store.charge("open-1", scopes(1.0), 0.5, event("open-1", 0.5))
    status = {s.scope: s for s in await store.status(scopes(1.0))}
    assert status["tenant:acme"].spent_usd == pytest.approx(0.5)
    assert status["tenant:acme"].held_usd == pytest.approx(0.8)
    assert status[GLOBAL_SCOPE].spent_usd == pytest.approx(0.5)
    assert isinstance(await store.reserve("r2", scopes(1.0), [0.1]), Denied)
    assert await store.settle(held, 0.2)
    await store.set_limit("tenant:acme", BudgetSpec(limit_usd=9.0, window="total"))
    assert await store.charge("open-2", scopes(1.0), 0.25)  # counts in the override's window
    (tenant,) = [s for s in await store.status(scopes(1.0)) if s.scope == "tenant:acme"]
    assert (tenant.window, tenant.spent_usd) == ("total", pytest.approx(0.25))
    assert await store.active_holds() == 0
    days = await backend.ledger.daily(["acme"], *[datetime.now(UTC).date()] * 2)
    assert days[0].get("cost_usd") == pytest.approx(0.5)  # the one charge with an event


async def test_a_denial_says_whether_settling_the_open_holds_could_make_room(
    backend: Backend,
) -> None:
    """Refused while holds fill the budget: not final (its spend leaves room for the worst
    case once they settle); refused once the spend itself leaves too little: final. The
    scope that binds is the one with the least unspent (the key's here)."""
    store = backend.budgets
    first = await store.reserve("h1", scopes(1.0, 0.8), [0.6])
    assert isinstance(first, Reservation)
    waiting = await store.reserve("h2", scopes(1.0, 0.8), [0.5])
    assert isinstance(waiting, Denied) and not waiting.final
    assert waiting.unheld_usd == pytest.approx(0.8)
    await store.settle(first, 0.4, event("h1", 0.4))
    ran = await store.reserve("h2", scopes(1.0, 0.8), [0.3])
    assert isinstance(ran, Reservation)
    await store.settle(ran, 0.3, event("h2", 0.3))
    final = await store.reserve("h3", scopes(1.0, 0.8), [0.2])
    assert isinstance(final, Denied) and final.final
    assert final.unheld_usd == pytest.approx(0.1)
