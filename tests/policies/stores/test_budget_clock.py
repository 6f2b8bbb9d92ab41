"""Day and month budget windows come from Redis ``TIME``, not from each replica's clock:
replicas whose clocks are a day and a half apart still share one daily cap."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import date, timedelta

import pytest

from policies.schema import BudgetSpec
from policies.stores.budget import (
    GLOBAL_SCOPE,
    Denied,
    Reservation,
    Scope,
    tenant_scope,
    window_ids,
)
from policies.stores.budget_redis import CALENDAR, RedisBudgetStore
from policies.stores.ledger_redis import RedisLedger
from policies.stores.store_redis import RedisStore
from tests.redis_servers import REDIS7_URL, redis_store

SKEW_S = 1.5 * 86_400


@pytest.fixture(params=["redis", "cluster"])
async def owner(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    async with redis_store(url, cluster=cluster) as store:
        yield store


def scopes(window: str) -> list[Scope]:
    return [
        Scope(GLOBAL_SCOPE, None),
        Scope(tenant_scope("acme"), BudgetSpec(limit_usd=1.0, window=window)),
    ]


@pytest.mark.parametrize("window", ["daily", "monthly"])
async def test_skewed_replicas_share_the_server_s_window(
    owner: RedisStore, window: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    day, month = window_ids(await owner.server_time())
    server_window = day if window == "daily" else month
    budgets = RedisBudgetStore(RedisLedger(owner))
    real_clock = time.time

    monkeypatch.setattr(time, "time", lambda: real_clock() + SKEW_S)  # this replica: ahead
    ahead = await budgets.reserve("r-ahead", scopes(window), [0.6])
    assert isinstance(ahead, Reservation)
    assert f"tenant:acme|{server_window}" in ahead.fields

    monkeypatch.setattr(time, "time", lambda: real_clock() - SKEW_S)  # another one: behind
    behind = await budgets.reserve("r-behind", scopes(window), [0.6])
    assert isinstance(behind, Denied) and behind.scope == "tenant:acme"
    (tenant,) = [s for s in await budgets.status(scopes(window)) if s.scope == "tenant:acme"]
    assert tenant.held_usd == pytest.approx(0.6)
    assert await budgets.settle(ahead, 0.5)
    (tenant,) = [s for s in await budgets.status(scopes(window)) if s.scope == "tenant:acme"]
    assert (tenant.spent_usd, tenant.held_usd) == (pytest.approx(0.5), 0.0)


async def test_the_script_s_calendar_matches_python_s(owner: RedisStore) -> None:
    """The Lua date conversion agrees with ``datetime`` on the server's today."""
    budgets = RedisBudgetStore(RedisLedger(owner))
    daily = await budgets.reserve("r-day", scopes("daily"), [0.1])
    monthly = await budgets.reserve("r-month", scopes("monthly"), [0.1])
    assert isinstance(daily, Reservation) and isinstance(monthly, Reservation)
    day, month = window_ids(await owner.server_time())
    assert daily.fields == ("global|total", f"tenant:acme|{day}")
    assert monthly.fields == ("global|total", f"tenant:acme|{month}")


async def test_the_calendar_over_four_centuries(owner: RedisStore) -> None:
    """Leap years, century years and month ends, against ``datetime``."""
    probe = owner.script(CALENDAR + "return {civil(tonumber(ARGV[1]))}")
    epoch = date(1970, 1, 1)
    days = [*range(-1, 800), *range(10_950, 11_050), *range(47_400, 47_500), 146_096, 146_097]
    for n in days:
        expected = epoch + timedelta(days=n)
        got = await probe("calendar", [owner.keys("probe")], [n])
        assert tuple(got) == (expected.year, expected.month, expected.day), n
