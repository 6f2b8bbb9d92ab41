"""The in-process stores keep only what idempotency and the dashboard need: settled ids
for one reservation TTL, the current windows' counters, the newest events, and the
per-day aggregates within retention."""

from __future__ import annotations

import time
from datetime import date

import pytest

from policies.schema import BudgetSpec
from policies.stores.budget import Reservation, Scope, key_scope, tenant_scope
from policies.stores.budget_memory import MemoryBudgetStore
from policies.stores.ledger import MemoryLedger, SpendEvent, day_of


class Clock:
    """The store's clock (unix seconds), moved by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


SCOPES = [Scope(tenant_scope("acme"), BudgetSpec(limit_usd=1e6, window="total"))]


async def settle(store: MemoryBudgetStore, request_id: str, scopes: list[Scope] = SCOPES) -> bool:
    held = await store.reserve(request_id, scopes, [0.1])
    assert isinstance(held, Reservation)
    return await store.settle(held, 0.1)


async def test_settled_ids_are_refused_for_one_ttl_then_forgotten() -> None:
    clock = Clock(1_000_000.0)
    store = MemoryBudgetStore(MemoryLedger(), ttl_s=30, clock=clock)
    assert await settle(store, "r1") and await settle(store, "r2")
    clock.now += 20
    assert not await settle(store, "r1")  # a retry within the TTL charges nothing
    clock.now += 31
    assert await settle(store, "r3")  # ... and this settle drops the ids older than a TTL
    assert await settle(store, "r1") and await settle(store, "r2")
    assert not await settle(store, "r3")


async def test_each_hold_expires_at_its_own_deadline_whatever_settled_before() -> None:
    """Holds are scanned only once the earliest deadline the store knows has passed; one
    settled early leaves that deadline behind, which costs a scan, never a late release."""
    clock = Clock(1_000_000.0)
    store = MemoryBudgetStore(MemoryLedger(), ttl_s=10, clock=clock)
    assert await settle(store, "early")  # its deadline, t+10, stays the earliest known
    clock.now += 5
    assert isinstance(await store.reserve("lost", SCOPES, [0.1]), Reservation)  # due t+15
    clock.now += 1
    store.ttl_s = 2
    assert isinstance(await store.reserve("short", SCOPES, [0.1]), Reservation)  # due t+8
    clock.now += 1  # t+7
    assert await store.active_holds() == 2
    clock.now += 1  # t+8: "short" is due, "lost" is not
    assert await store.active_holds() == 1
    clock.now += 6.5  # t+14.5
    assert await store.active_holds() == 1
    clock.now += 0.5  # t+15
    assert await store.active_holds() == 0
    (status,) = await store.status(SCOPES)
    assert status.held_usd == 0.0


async def test_memory_is_bounded_by_rate_times_ttl() -> None:
    clock = Clock(1_000_000.0)
    store = MemoryBudgetStore(MemoryLedger(), ttl_s=10, clock=clock)
    for i in range(20_000):  # 200 s at 100 requests/s
        clock.now += 0.01
        assert await settle(store, f"r{i}")
    assert len(store._settled) <= 10 * 100 + 1
    assert not store._holds and not store._held


async def test_past_windows_are_forgotten() -> None:
    clock = Clock(1_000_000.0)  # 1970-01-12
    store = MemoryBudgetStore(MemoryLedger(), ttl_s=10, clock=clock)
    daily = [
        Scope(tenant_scope("acme"), BudgetSpec(limit_usd=1.0, window="daily")),
        Scope(key_scope("acme", "k1"), BudgetSpec(limit_usd=5.0, window="total")),
    ]
    for day in range(40):
        clock.now = 1_000_000.0 + day * 86_400
        assert await settle(store, f"d{day}", daily)
    days = {f for f in store._spent if "|d:" in f}
    assert len(days) <= 2  # today and yesterday
    (status,) = [s for s in await store.status(daily) if s.scope == "tenant:acme"]
    assert status.spent_usd == pytest.approx(0.1)  # today's window still counts
    assert store._spent["key:acme:k1|total"] == 40 * 100_000_000  # totals are never dropped


def event(ts: float, n: int) -> SpendEvent:
    return SpendEvent(
        ts=ts, request_id=f"r{n}", tenant="acme", key_id="k1", tier="small", model="m",
        cost_usd=0.001,
    )  # fmt: skip


async def test_the_memory_ledger_keeps_aggregates_and_only_the_newest_events() -> None:
    ledger = MemoryLedger(max_events=100, retention_days=3)
    start = time.time() - 10 * 86_400
    for n in range(1000):
        await ledger.record(event(start + n * 864, n))  # ten days, 100 events a day
    assert len(ledger._events) == 100
    newest = await ledger.events(0, time.time(), limit=500)
    assert [e.request_id for e in newest] == [f"r{n}" for n in range(900, 1000)]
    kept = sorted(day for _, day in ledger._aggregates)
    assert len(kept) <= 4 and kept[-1] == day_of(start + 999 * 864)
    newest_day = date.fromisoformat(kept[-1])
    (last,) = await ledger.daily(["acme"], newest_day, newest_day)
    assert last.get("requests") == sum(
        1 for n in range(1000) if day_of(start + n * 864) == kept[-1]
    )
