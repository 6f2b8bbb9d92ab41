"""One contract for every cache storage: memory, Redis 7 + stream index, Redis 8 vector sets,
and both Redis storages on a 3-master Redis Cluster (a tenant's keys share one slot).

Vectors here are random unit vectors, so these tests need no model; the gateway tests
use the real embedder.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from gateway.cache.build import has_vector_sets, storage_name
from policies.schema import CacheConfig
from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.memory import MemoryStorage
from policies.stores.cache.storage import CacheStorage, Semantic
from policies.stores.cache.streamindex import StreamIndexStorage
from policies.stores.cache.vectorsets import VectorSetStorage
from policies.stores.store_redis import RedisStore
from tests.redis_servers import (
    REDIS7_URL,
    RedisClusterProcess,
    RedisProcess,
    cache_prefix,
    delete_prefix,
)
from tiergate_testing.net import free_port

KINDS = [
    "memory",
    "redis7-stream",
    "redis8-stream",
    "redis8-vectorset",
    "cluster-stream",
    "cluster-vectorset",
]


def unit(seed: int, dim: int = 384) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def near(vector: np.ndarray, seed: int, noise: float = 0.05) -> np.ndarray:
    moved = vector + noise * unit(seed)
    return (moved / np.linalg.norm(moved)).astype(np.float32)


@pytest.fixture(params=KINDS)
async def storage(
    request: pytest.FixtureRequest, redis8: RedisProcess
) -> AsyncIterator[tuple[CacheStorage, str]]:
    root = cache_prefix()
    cluster = request.param.startswith("cluster")
    url = REDIS7_URL if request.param.startswith("redis7") else redis8.url
    if cluster:
        url = request.getfixturevalue("redis_cluster").url
    built: CacheStorage
    if request.param == "memory":
        built = MemoryStorage()
    elif request.param.endswith("stream"):
        owner = RedisStore(url, cluster=cluster, timeout_s=0.5)
        built = StreamIndexStorage(owner, root=root, maxlen=10_000)
    else:
        built = VectorSetStorage(RedisStore(url, cluster=cluster, timeout_s=0.5))
    await built.start(["acme", "globex"])
    yield built, root
    await built.aclose()
    if request.param != "memory" and not cluster:  # the cluster lives for this session only
        delete_prefix(url, root)


async def test_capability_detection(
    redis8: RedisProcess, redis_cluster: RedisClusterProcess
) -> None:
    seven, eight = RedisStore(REDIS7_URL), RedisStore(redis8.url)
    cluster = RedisStore(redis_cluster.url, cluster=True)
    try:
        assert await has_vector_sets(seven) is False
        assert await has_vector_sets(eight) is True
        assert await has_vector_sets(cluster) is True
        cache = CacheConfig(key_prefix=cache_prefix())
        assert await storage_name(cluster, cache) == "vectorset"
        assert await storage_name(seven, cache) == "stream"
        dead = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
        assert await storage_name(dead, cache) == "stream"  # told in the log, not an error
        await dead.aclose()
    finally:
        await seven.aclose()
        await eight.aclose()
        await cluster.aclose()


async def test_exact_entries_are_per_tenant(storage: tuple[CacheStorage, str]) -> None:
    store, root = storage
    acme, globex = CacheKeys(root, "acme"), CacheKeys(root, "globex")
    await store.put(acme, "d1", b"acme-answer", None, 60, 100)
    assert await store.get(acme, "d1") == b"acme-answer"
    assert await store.get(globex, "d1") is None
    await store.put(globex, "d1", b"globex-answer", None, 60, 100)
    assert await store.get(acme, "d1") == b"acme-answer"
    assert await store.get(globex, "d1") == b"globex-answer"


async def test_candidates_need_same_tenant_and_prefix(storage: tuple[CacheStorage, str]) -> None:
    store, root = storage
    acme, globex = CacheKeys(root, "acme"), CacheKeys(root, "globex")
    vector = unit(1)
    await store.put(acme, "d1", b"r1", Semantic("p1", "text one", vector), 60, 100)
    await store.put(acme, "d2", b"r2", Semantic("p1", "text two", unit(2)), 60, 100)
    found = await store.candidates(acme, "p1", near(vector, 3), 2)
    assert found[0].digest == "d1"
    assert found[0].record == b"r1" and found[0].text == "text one"
    assert float(found[0].vector @ vector) == pytest.approx(1.0, abs=1e-5)
    assert await store.candidates(acme, "p2", vector, 2) == []
    assert await store.candidates(globex, "p1", vector, 2) == []


async def test_two_embedding_spaces_never_meet(storage: tuple[CacheStorage, str]) -> None:
    """A tenant's entries written by two embedders (a rolling deploy, 384-d MiniLM and the
    256-d static table) live side by side: neither errors on the other's dimension, and a
    query only ever sees its own space (the vector set and the semantic prefix carry it)."""
    store, root = storage
    spaces = {"minilm": 384, "static": 256}
    for space, dim in spaces.items():
        keys = CacheKeys(root, "acme", space)
        await store.put(
            keys, f"d-{space}", space.encode(), Semantic(f"p:{space}", "t", unit(1, dim)), 60, 100
        )
    for space, dim in spaces.items():
        keys = CacheKeys(root, "acme", space)
        found = await store.candidates(keys, f"p:{space}", unit(1, dim), 5)
        assert [c.digest for c in found] == [f"d-{space}"]
        assert len(found[0].vector) == dim


async def test_oldest_entries_are_evicted_past_max(storage: tuple[CacheStorage, str]) -> None:
    store, root = storage
    keys = CacheKeys(root, "acme")
    for i in range(5):
        await store.put(keys, f"d{i}", f"r{i}".encode(), Semantic("p", f"t{i}", unit(i)), 60, 3)
        await asyncio.sleep(0.002)  # distinct store times
    assert await store.get(keys, "d0") is None and await store.get(keys, "d1") is None
    assert await store.get(keys, "d4") == b"r4"
    assert (await store.usage(keys)).entries == 3
    assert await store.candidates(keys, "p", unit(0), 5) != []
    assert "d0" not in {c.digest for c in await store.candidates(keys, "p", unit(0), 5)}


async def test_entries_expire(storage: tuple[CacheStorage, str]) -> None:
    store, root = storage
    keys = CacheKeys(root, "acme")
    await store.put(keys, "d1", b"r1", Semantic("p", "t", unit(1)), 0.05, 10)
    await asyncio.sleep(0.12)
    assert await store.get(keys, "d1") is None
    assert await store.candidates(keys, "p", unit(1), 3) == []


async def test_flush_and_usage(storage: tuple[CacheStorage, str]) -> None:
    store, root = storage
    acme, globex = CacheKeys(root, "acme"), CacheKeys(root, "globex")
    for i in range(4):
        await store.put(acme, f"d{i}", b"x" * 200, Semantic("p", "t", unit(i)), 60, 100)
    await store.put(globex, "g", b"y", None, 60, 100)
    usage = await store.usage(acme)
    assert usage.entries == 4 and usage.memory_bytes > 4 * 200
    assert await store.flush(acme) == 4
    assert (await store.usage(acme)).entries == 0
    assert await store.get(acme, "d0") is None
    assert await store.candidates(acme, "p", unit(0), 3) == []
    assert await store.get(globex, "g") == b"y"


@pytest.mark.parametrize("where", ["redis7", "cluster"])
async def test_stream_index_syncs_replicas(where: str, request: pytest.FixtureRequest) -> None:
    """Two replicas: B's index learns A's entries (and flushes) from the stream."""
    root = cache_prefix()
    cluster = where == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    a = StreamIndexStorage(RedisStore(url, cluster=cluster), root=root, maxlen=10_000)
    b = StreamIndexStorage(RedisStore(url, cluster=cluster), root=root, maxlen=10_000)
    keys = CacheKeys(root, "acme")
    try:
        await a.start(["acme"])
        await a.put(keys, "before", b"r0", Semantic("p", "t0", unit(7)), 60, 100)
        await b.start(["acme"])  # loads "before" from Redis
        await a.put(keys, "after", b"r1", Semantic("p", "t1", unit(8)), 60, 100)
        for _ in range(100):
            if len(b.index) == 2:
                break
            await asyncio.sleep(0.02)
        assert {c.digest for c in await b.candidates(keys, "p", unit(8), 2)} == {"before", "after"}
        await a.flush(keys)
        for _ in range(100):
            if len(b.index) == 0:
                break
            await asyncio.sleep(0.02)
        assert len(b.index) == 0
    finally:
        await a.aclose()
        await b.aclose()
        if not cluster:
            delete_prefix(REDIS7_URL, root)


async def test_remove_evicts_an_entry_from_every_index(storage: tuple[CacheStorage, str]) -> None:
    store, root = storage
    keys = CacheKeys(root, "acme")
    await store.put(keys, "d1", b"r1", Semantic("p", "cached question", unit(1)), 60, 100)
    await store.put(keys, "d2", b"r2", Semantic("p", "another", unit(2)), 60, 100)
    await store.put(keys, "x", b"rx", None, 60, 100)
    assert await store.remove(keys, "d1") == "cached question"
    assert await store.get(keys, "d1") is None
    assert "d1" not in {c.digest for c in await store.candidates(keys, "p", unit(1), 3)}
    assert await store.get(keys, "d2") == b"r2"  # only that entry
    assert (await store.usage(keys)).entries == 2
    assert await store.remove(keys, "d1") is None  # already gone
    assert await store.remove(keys, "x") == ""  # an entry stored without a text
    assert await store.remove(CacheKeys(root, "globex"), "d2") is None  # not another tenant's


async def test_stats_add_up_and_labels_keep_the_newest(storage: tuple[CacheStorage, str]) -> None:
    store, root = storage
    acme, globex = CacheKeys(root, "acme"), CacheKeys(root, "globex")
    await store.add_stats(acme, {"lookups": 2, "verify_ms": 1.5})
    await store.add_stats(acme, {"lookups": 1, "refused:numbers": 1})
    assert await store.read_stats(acme) == {"lookups": 3, "verify_ms": 1.5, "refused:numbers": 1}
    assert await store.read_stats(globex) == {}
    for i in range(5):
        await store.add_label(acme, f"label{i}".encode(), 3)
    assert await store.labels(acme, 10) == [b"label4", b"label3", b"label2"]
    assert await store.labels(acme, 1) == [b"label4"]
    assert await store.labels(globex, 10) == []


@pytest.mark.parametrize("where", ["redis7", "cluster"])
async def test_stream_index_removal_reaches_other_replicas(
    where: str, request: pytest.FixtureRequest
) -> None:
    root = cache_prefix()
    cluster = where == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    a = StreamIndexStorage(RedisStore(url, cluster=cluster), root=root, maxlen=10_000)
    b = StreamIndexStorage(RedisStore(url, cluster=cluster), root=root, maxlen=10_000)
    keys = CacheKeys(root, "acme")
    try:
        await a.start(["acme"])
        await b.start(["acme"])
        await a.put(keys, "d1", b"r1", Semantic("p", "t1", unit(8)), 60, 100)
        for _ in range(100):
            if b.index.has("acme", "d1"):
                break
            await asyncio.sleep(0.02)
        assert b.index.has("acme", "d1")
        assert await b.remove(keys, "d1") == "t1"  # removed through the other replica
        for _ in range(100):
            if not a.index.has("acme", "d1"):
                break
            await asyncio.sleep(0.02)
        assert not a.index.has("acme", "d1") and not b.index.has("acme", "d1")
    finally:
        await a.aclose()
        await b.aclose()
        if not cluster:
            delete_prefix(REDIS7_URL, root)
