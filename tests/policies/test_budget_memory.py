"""The in-process budget store's memory of settled request ids (a day, then forgotten)."""

from __future__ import annotations

import pytest

from policies import budget_memory
from policies.budget import Reservation, Scope, tenant_scope
from policies.budget_memory import SETTLED_KEEP_S, MemoryBudgetStore
from policies.ledger import MemoryLedger
from policies.schema import BudgetSpec


class Clock:
    """Stands in for the ``time`` module the store reads ``time()`` from."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


SCOPES = [Scope(tenant_scope("acme"), BudgetSpec(limit_usd=100.0, window="total"))]


async def settle(store: MemoryBudgetStore, request_id: str) -> bool:
    held = await store.reserve(request_id, SCOPES, [0.1])
    assert isinstance(held, Reservation)
    return await store.settle(held, 0.1)


async def test_settled_ids_are_refused_for_a_day_then_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(1_000_000.0)
    monkeypatch.setattr(budget_memory, "time", clock)
    store = MemoryBudgetStore(MemoryLedger(), ttl_s=30)
    assert await settle(store, "r1") and await settle(store, "r2")
    clock.now += 60
    assert not await settle(store, "r1")  # a retry within the day charges nothing
    clock.now += SETTLED_KEEP_S
    assert await settle(store, "r3")  # ... and this settle drops the ids older than a day
    assert await settle(store, "r1") and await settle(store, "r2")
    assert not await settle(store, "r3")
