"""The Redis 7 stream index forgets what Redis forgot: a tenant that stops storing lets its
entries (and its ``order`` set) lapse without any event, and every replica's in-memory
index still drops their vectors, a bounded number per tail read. On the real Redis 7,
under a key prefix of its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest
import redis

from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.localindex import LocalIndex
from policies.stores.cache.storage import Semantic
from policies.stores.cache.streamindex import StreamIndexStorage
from policies.stores.store_redis import RedisStore
from tests.redis_servers import REDIS7_URL, cache_prefix, delete_prefix

GRACE_S = 0.1


def unit(seed: int, dim: int = 384) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[StreamIndexStorage, StreamIndexStorage, str]]:
    root = cache_prefix()

    def replica() -> StreamIndexStorage:
        store = RedisStore(REDIS7_URL, timeout_s=2.0)
        return StreamIndexStorage(store, root=root, maxlen=10_000, expiry_grace_s=GRACE_S)

    a, b = replica(), replica()
    await a.start(["acme", "globex"])
    await b.start(["acme", "globex"])
    try:
        yield a, b, root
    finally:
        await a.aclose()
        await b.aclose()
        delete_prefix(REDIS7_URL, root)


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def put(storage: StreamIndexStorage, keys: CacheKeys, digest: str, ttl_s: float) -> None:
    semantic = Semantic(f"p{int(digest[1:]) % 3}", f"text {digest}", unit(int(digest[1:])))
    await storage.put(keys, digest, b"record", semantic, ttl_s, 1000)


async def test_an_idle_tenants_vectors_leave_every_replica(
    pair: tuple[StreamIndexStorage, StreamIndexStorage, str],
) -> None:
    a, b, root = pair
    acme, globex = CacheKeys(root, "acme"), CacheKeys(root, "globex")
    for i in range(60):
        await put(a, acme, f"d{i}", ttl_s=0.5)
    for i in range(5):
        await put(a, globex, f"d{i}", ttl_s=60)
    assert await until(lambda: len(b.index) == 65)
    # No store, no lookup from here on: acme's entries and its order set lapse in Redis,
    # and nothing is published about it.
    client = redis.Redis.from_url(REDIS7_URL)
    try:
        assert await until(lambda: client.exists(acme.order) == 0, timeout_s=5)
        assert client.exists(globex.order) == 1
    finally:
        client.close()
    assert await until(lambda: len(a.index) == 5 and len(b.index) == 5, timeout_s=5)
    assert a.index.count("acme") == b.index.count("acme") == 0
    assert a.index.count("globex") == b.index.count("globex") == 5
    assert a.expired == b.expired == 60
    assert b.index.pending() == 5  # nothing held for what is gone


async def test_a_renewed_entry_keeps_its_vector_on_other_replicas(
    pair: tuple[StreamIndexStorage, StreamIndexStorage, str],
) -> None:
    a, b, root = pair
    keys = CacheKeys(root, "acme")
    await put(a, keys, "d1", ttl_s=0.6)
    assert await until(lambda: b.index.count("acme") == 1)
    # Read before the renewal: b's reader runs on this loop and may apply it while the
    # put is still awaited, before a count read after it.
    applied = b.applied
    await put(a, keys, "d1", ttl_s=60)  # the same entry again, now for a minute
    assert await until(lambda: b.applied > applied)
    await asyncio.sleep(0.6 + GRACE_S + 0.5)
    assert b.index.count("acme") == a.index.count("acme") == 1
    assert [c.digest for c in await b.candidates(keys, "p1", unit(1), 1)] == ["d1"]


async def test_a_replica_started_later_loads_only_live_entries_with_their_expiry(
    pair: tuple[StreamIndexStorage, StreamIndexStorage, str],
) -> None:
    a, _, root = pair
    keys = CacheKeys(root, "acme")
    await put(a, keys, "d1", ttl_s=0.8)
    late = StreamIndexStorage(
        RedisStore(REDIS7_URL, timeout_s=2.0), root=root, maxlen=10_000, expiry_grace_s=GRACE_S
    )
    await late.start(["acme"])
    try:
        assert await until(lambda: late.index.count("acme") == 1)
        assert await until(lambda: late.index.count("acme") == 0, timeout_s=5)
        assert late.expired == 1
    finally:
        await late.aclose()


def test_one_sweep_looks_at_a_bounded_number_of_expiry_times() -> None:
    index = LocalIndex()
    for i in range(100):
        index.add("acme", f"d{i}", "p", unit(i), expires=1000.0 + i)
    index.remove("acme", "d0")  # its expiry time is now stale: looked at, not counted
    assert index.expire(now=2000.0, limit=30) == 29
    assert len(index) == 70
    assert index.expire(now=1050.0, limit=1000) == 21  # d30 .. d50; later ones not yet due
    assert len(index) == 49
    index.add("acme", "d99", "p", unit(99), expires=5000.0)  # renewed: the old time is stale
    assert index.expire(now=2000.0, limit=1000) == 48
    assert [index.has("acme", "d99"), len(index)] == [True, 1]
