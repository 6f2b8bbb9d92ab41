"""One contract for every ``Store``: in-process, real Redis on 127.0.0.1:6379, and a real
3-master Redis Cluster."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from policies.schema import GatewayConfig
from policies.stores.factories import open_store
from policies.stores.store import MemoryStore, Store, StoreUnavailable
from policies.stores.store_redis import RedisStore
from tests.redis_servers import REDIS7_URL, RedisClusterProcess, RedisProcess, redis_store
from tiergate_testing.configs import fake_config

REDIS_URL = REDIS7_URL


@pytest.fixture(params=["memory", "redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS_URL
    async with redis_store(url, cluster=cluster) as built:
        yield built


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


async def test_many_keys_delete_across_slots(store: Store, ns: str) -> None:
    names = [f"{ns}{i}" for i in range(20)]  # spread over every node of a cluster
    for name in names:
        await store.set(name, b"v")
    assert await store.delete(*names) == 20


async def test_server_time_is_one_clock(store: Store) -> None:
    assert abs(await store.server_time() - time.time()) < 5


async def test_publish_reaches_every_subscriber(store: Store) -> None:
    channel = store.keys("reload") + ":" + uuid.uuid4().hex

    async def first(messages: AsyncIterator[bytes]) -> bytes:
        async for message in messages:
            return message
        raise AssertionError("subscription ended")

    async with store.subscribe(channel) as a, store.subscribe(channel) as b:
        await asyncio.sleep(0.05)
        assert await store.publish(channel, b"v42") >= 1
        got = await asyncio.wait_for(asyncio.gather(first(a), first(b)), 5)
    assert got == [b"v42", b"v42"]


def test_keys_carry_one_hash_tag_per_sub_store() -> None:
    store = MemoryStore(root="tg")
    assert store.keys("rate") == "tg:{rate}"
    assert store.keys("budget", tag="ledger") == "tg:{ledger}:budget"


def test_open_store_picks_by_config(redis_cluster: RedisClusterProcess) -> None:
    base = fake_config()
    assert open_store(GatewayConfig.model_validate(base)).kind == "memory"
    single = open_store(GatewayConfig.model_validate({**base, "redis_url": REDIS_URL}))
    assert isinstance(single, RedisStore) and not single.cluster
    clustered = open_store(
        GatewayConfig.model_validate(
            {**base, "redis_url": redis_cluster.url, "redis_cluster": True, "redis_prefix": "x"}
        )
    )
    assert isinstance(clustered, RedisStore) and clustered.cluster and clustered.root == "x"


async def test_a_script_is_loaded_once_then_run_by_its_digest() -> None:
    """Redis 8 keeps no script sent with EVAL: each call would compile it again."""
    server = RedisProcess()
    server.start()
    try:
        async with redis_store(server.url) as store:
            script = store.script("return tonumber(ARGV[1]) + 1")
            assert [await script("probe", [store.keys("p")], [i]) for i in range(5)] == [
                1, 2, 3, 4, 5,
            ]  # fmt: skip
            stats = await store.client.info("commandstats")
    finally:
        server.stop()
    assert stats["cmdstat_script|load"]["calls"] == 1
    assert stats["cmdstat_evalsha"]["calls"] == 6  # the first one answered NOSCRIPT
    assert stats["cmdstat_evalsha"]["failed_calls"] == 1
    assert "cmdstat_eval" not in stats
