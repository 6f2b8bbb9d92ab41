"""One contract for both ledgers; the Redis one against the real server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import date

import pytest

from policies.stores.ledger import Ledger, MemoryLedger, SpendEvent, day_of
from policies.stores.ledger_redis import RedisLedger
from tests.redis_servers import REDIS7_URL, redis_store

DAY1 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture(params=["memory", "redis", "cluster"])
async def ledger(request: pytest.FixtureRequest) -> AsyncIterator[Ledger]:
    if request.param == "memory":
        yield MemoryLedger()
        return
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    async with redis_store(url, cluster=cluster) as store:
        yield RedisLedger(store)


def event(ts: float, tenant: str, tier: str, cost: float, **extra: object) -> SpendEvent:
    return SpendEvent(
        ts=ts,
        request_id=uuid.uuid4().hex,
        tenant=tenant,
        key_id=f"{tenant}-k",
        tier=tier,
        model=f"m-{tier}",
        cost_usd=cost,
        prompt_tokens=10,
        completion_tokens=5,
        **extra,
    )  # type: ignore[arg-type]


async def test_events_roundtrip_and_aggregates_sum(ledger: Ledger) -> None:
    recorded = [
        event(DAY1 + 10, "acme", "small", 0.5, saved_routing_usd=1.5),
        event(DAY1 + 20, "acme", "large", 2.0, downgraded=True),
        event(DAY1 + 30, "globex", "medium", 1.0),
        SpendEvent(
            ts=DAY1 + 40,
            request_id="d1",
            tenant="acme",
            key_id="acme-k",
            tier="large",
            model="m-large",
            kind="denied",
            status="budget",
        ),
        event(DAY1 + 86_400 + 5, "acme", "small", 0.25, cache="exact", saved_cache_usd=0.7),
    ]
    for e in recorded:
        await ledger.record(e)
    got = await ledger.events(DAY1, DAY1 + 2 * 86_400)
    assert got == recorded
    days = await ledger.daily(["acme", "globex"], date(2026, 1, 1), date(2026, 1, 3))
    by = {(d.tenant, d.day): d for d in days}
    first = by[("acme", "2026-01-01")]
    assert first.get("requests") == 2
    assert first.get("cost_usd") == pytest.approx(2.5)
    assert first.get("saved_routing_usd") == pytest.approx(1.5)
    assert first.get("tier_requests:large") == 1
    assert first.get("downgraded") == 1
    assert first.get("denied_budget") == 1
    second = by[("acme", "2026-01-02")]
    assert second.get("cache_exact") == 1 and second.get("saved_cache_usd") == pytest.approx(0.7)
    assert by[("globex", "2026-01-01")].get("cost_usd") == pytest.approx(1.0)
    assert ("globex", "2026-01-02") not in by
    requests = [e for e in got if e.kind == "request"]
    assert sum(e.cost_usd for e in requests) == pytest.approx(sum(d.get("cost_usd") for d in days))


async def test_events_window_and_limit(ledger: Ledger) -> None:
    for i in range(5):
        await ledger.record(event(DAY1 + i, "acme", "small", 0.1))
    assert [e.ts for e in await ledger.events(DAY1 + 1, DAY1 + 3)] == [DAY1 + 1, DAY1 + 2, DAY1 + 3]
    assert [e.ts for e in await ledger.events(DAY1, DAY1 + 10, limit=2)] == [DAY1 + 3, DAY1 + 4]


def test_day_of_is_utc() -> None:
    assert day_of(DAY1 - 1) == "2025-12-31"
    assert day_of(DAY1) == "2026-01-01"


async def test_a_late_event_is_still_recorded(ledger: Ledger) -> None:
    """A replica whose clock lags writes an event older than the stream's newest one."""
    await ledger.record(event(DAY1 + 100, "acme", "small", 0.1))
    await ledger.record(event(DAY1 + 99, "acme", "small", 0.2))
    days = await ledger.daily(["acme"], date(2026, 1, 1), date(2026, 1, 1))
    assert days[0].get("requests") == 2
    assert days[0].get("cost_usd") == pytest.approx(0.3)
