"""One contract for every ``Store``: the in-process one and real Redis on 127.0.0.1:6379."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from policies.store import MemoryStore, RedisStore, Store, StoreUnavailable, open_store

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    built: Store = MemoryStore() if request.param == "memory" else RedisStore(REDIS_URL)
    yield built
    await built.aclose()


@pytest.fixture
def ns() -> str:
    return f"test:{uuid.uuid4().hex}:"


async def test_get_set_delete(store: Store, ns: str) -> None:
    assert await store.get(ns + "a") is None
    await store.set(ns + "a", b"1")
    assert await store.get(ns + "a") == b"1"
    assert await store.delete(ns + "a", ns + "missing") == 1
    assert await store.get(ns + "a") is None


async def test_ttl_expires(store: Store, ns: str) -> None:
    await store.set(ns + "t", b"x", ttl_s=0.05)
    assert await store.get(ns + "t") == b"x"
    await asyncio.sleep(0.12)
    assert await store.get(ns + "t") is None


async def test_counters_and_hashes(store: Store, ns: str) -> None:
    assert await store.incrbyfloat(ns + "c", 1.5) == pytest.approx(1.5)
    assert await store.incrbyfloat(ns + "c", -0.25) == pytest.approx(1.25)
    await store.hincrbyfloat(ns + "h", "spend", 2.0)
    await store.hincrbyfloat(ns + "h", "spend", 0.5)
    await store.hincrbyfloat(ns + "h", "saved", 1.0)
    fields = await store.hgetall(ns + "h")
    assert {k: float(v) for k, v in fields.items()} == {"spend": 2.5, "saved": 1.0}
    await store.delete(ns + "c", ns + "h")
    assert await store.hgetall(ns + "h") == {}


async def test_concurrent_increments_are_not_lost(store: Store, ns: str) -> None:
    await asyncio.gather(*(store.incrbyfloat(ns + "n", 1.0) for _ in range(200)))
    assert float(await store.get(ns + "n") or b"0") == 200.0
    await store.delete(ns + "n")


async def test_ping(store: Store) -> None:
    assert await store.ping() is True


async def test_unreachable_redis_raises_store_unavailable() -> None:
    dead = RedisStore("redis://127.0.0.1:1/0", timeout_s=0.2)
    with pytest.raises(StoreUnavailable):
        await dead.get("x")
    assert await dead.ping() is False
    await dead.aclose()


def test_open_store_picks_by_url() -> None:
    assert open_store(None).kind == "memory"
    assert open_store(REDIS_URL).kind == "redis"
