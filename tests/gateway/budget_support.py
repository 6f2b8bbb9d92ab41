"""Configs and Redis helpers shared by the budget tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from policies.stores.budget import Scope, ScopeStatus
from policies.stores.budget_redis import RedisBudgetStore
from policies.stores.ledger import SpendEvent
from policies.stores.ledger_redis import RedisLedger
from policies.stores.store_redis import RedisStore
from tiergate_testing.configs import fake_config

REDIS_URL = "redis://127.0.0.1:6379/0"
ADMIN_KEY = "tg-admin-key-for-tests-000"

# The fake answers 8 tokens; a prompt of "hi" is 1 word. What one request costs per tier.
PRICES = {"small": (0.1, 0.2), "medium": (1.0, 2.0), "large": (10.0, 20.0)}


def budget_config(prefix: str, max_inflight: int = 256, **engine_options: Any) -> dict[str, Any]:
    config = fake_config(max_inflight, **engine_options)
    config["redis_url"] = REDIS_URL
    config["redis_prefix"] = prefix
    config["admin"] = {"key_from_env": "TIERGATE_ADMIN_KEY"}
    return config


def new_prefix() -> str:
    return f"tgtest-{uuid.uuid4().hex[:12]}"


@contextmanager
def redis_prefix() -> Iterator[str]:
    """A fresh key prefix, and every key under it deleted afterwards."""
    prefix = new_prefix()
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


class BudgetProbe:
    """Reads a gateway's budget state straight from Redis (its own loop, its own pool)."""

    def __init__(self, prefix: str, url: str = REDIS_URL, *, cluster: bool = False) -> None:
        self.prefix = prefix
        self.url = url
        self.cluster = cluster

    async def _with_store(self, work: Any) -> Any:
        store = RedisStore(self.url, root=self.prefix, cluster=self.cluster, timeout_s=5.0)
        try:
            ledger = RedisLedger(store)
            return await work(RedisBudgetStore(ledger), ledger)
        finally:
            await store.aclose()

    def status(self, scopes: list[Scope]) -> dict[str, ScopeStatus]:
        async def work(budgets: RedisBudgetStore, _: RedisLedger) -> dict[str, ScopeStatus]:
            return {s.scope: s for s in await budgets.status(scopes)}

        result: dict[str, ScopeStatus] = asyncio.run(self._with_store(work))
        return result

    def holds(self) -> int:
        async def work(budgets: RedisBudgetStore, _: RedisLedger) -> int:
            return await budgets.active_holds()

        result: int = asyncio.run(self._with_store(work))
        return result

    def deadlines(self) -> tuple[float, list[float]]:
        """The store's clock and every hold's expiry, in seconds of that clock."""

        async def work(budgets: RedisBudgetStore, _: RedisLedger) -> tuple[float, list[float]]:
            now = await budgets.store.server_time()
            scored = await budgets.store.client.zrange(
                budgets.deadlines_key, 0, -1, withscores=True
            )
            return now, [float(score) / 1000 for _, score in scored]

        result: tuple[float, list[float]] = asyncio.run(self._with_store(work))
        return result

    def events(self) -> list[SpendEvent]:
        async def work(_: RedisBudgetStore, ledger: RedisLedger) -> list[SpendEvent]:
            return await ledger.events(time.time() - 3600, time.time() + 3600, limit=100_000)

        result: list[SpendEvent] = asyncio.run(self._with_store(work))
        return result

    def wait_no_holds(self, timeout_s: float = 10.0) -> int:
        deadline = time.monotonic() + timeout_s
        while (left := self.holds()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left
