"""One contract for both quota stores: a tenant's count and bytes of expiring entries,
admitted atomically against its caps (memory, Redis, Redis Cluster)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from policies.stores.quota import Caps, MemoryQuotas, QuotaStore, RedisQuotas, Usage
from tests.redis_servers import REDIS7_URL, redis_store

CAPS = Caps(count=3, bytes=1000)


@pytest.fixture(params=["memory", "redis", "cluster"])
async def quotas(request: pytest.FixtureRequest) -> AsyncIterator[QuotaStore]:
    if request.param == "memory":
        yield MemoryQuotas()
        return
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    async with redis_store(url, cluster=cluster) as store:
        yield RedisQuotas(store, f"test-{os.urandom(4).hex()}")


async def test_the_count_and_the_bytes_cap_what_a_tenant_keeps(quotas: QuotaStore) -> None:
    assert [await quotas.admit("acme", f"e{i}", 100, 60, CAPS) for i in range(4)] == [
        True,
        True,
        True,
        False,
    ]
    assert await quotas.usage("acme") == Usage(3, 300)
    assert not await quotas.admit("globex", "big", 1001, 60, CAPS)
    assert await quotas.admit("globex", "e0", 1000, 60, CAPS)  # another tenant: its own caps
    await quotas.release("acme", "e1")
    assert await quotas.usage("acme") == Usage(2, 200)
    assert await quotas.admit("acme", "e3", 100, 60, CAPS)


async def test_an_entry_admitted_again_counts_once_at_its_new_size(quotas: QuotaStore) -> None:
    assert await quotas.admit("acme", "e", 400, 60, CAPS)
    assert await quotas.admit("acme", "e", 900, 60, CAPS)
    assert await quotas.usage("acme") == Usage(1, 900)


async def test_expired_entries_leave_the_count(quotas: QuotaStore) -> None:
    for i in range(3):
        assert await quotas.admit("acme", f"short{i}", 100, 0.2, CAPS)
    assert not await quotas.admit("acme", "late", 100, 60, CAPS)
    await asyncio.sleep(0.3)
    assert await quotas.admit("acme", "late", 100, 60, CAPS)
    assert await quotas.usage("acme") == Usage(1, 100)


async def test_concurrent_admissions_never_pass_the_cap(quotas: QuotaStore) -> None:
    admitted = await asyncio.gather(
        *(quotas.admit("acme", f"c{i}", 10, 60, Caps(5, 10_000)) for i in range(30))
    )
    assert sum(admitted) == 5
