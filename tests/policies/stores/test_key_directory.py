"""The managed-key store contract (in-process and real Redis, same assertions) and the
hot-path directory: cache, invalidation by version poll, the staleness bound, scoping."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from policies.schema import GatewayConfig
from policies.stores.key_directory import KeyDirectory, scoped_policy
from policies.stores.keys import (
    KeyScope,
    KeyStore,
    ManagedKey,
    MemoryKeyStore,
    issue_key,
    runtime_tenant,
)
from policies.stores.keys_redis import RedisKeyStore
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore
from policies.tenants import KeyRing, hash_key
from tests.redis_servers import REDIS7_URL, delete_prefix, redis_store
from tiergate_testing.configs import fake_config

CONFIG = GatewayConfig.model_validate(fake_config())


@pytest.fixture(params=["memory", "redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[KeyStore]:
    if request.param == "memory":
        yield MemoryKeyStore()
        return
    if request.param == "cluster":
        async with redis_store(request.getfixturevalue("redis_cluster").url, cluster=True) as owner:
            on_cluster = RedisKeyStore(owner)
            yield on_cluster
            await on_cluster.aclose()
        return
    prefix = f"tgtest-kd-{uuid.uuid4().hex[:12]}"
    redis = RedisStore(REDIS7_URL)
    keys = RedisKeyStore(redis, prefix)
    try:
        yield keys
    finally:
        await keys.aclose()
        await redis.aclose()
        delete_prefix(REDIS7_URL, prefix + ":")


async def test_store_contract(store: KeyStore) -> None:
    start = await store.version()
    raw, key = issue_key("acme", "bot", KeyScope(allowed_tiers=("small",)))
    await store.put(key)
    assert await store.version() > start
    assert await store.by_digest(key.digest) == key
    assert await store.get(key.id) == key
    assert await store.get("key_missing") is None
    assert raw not in key.model_dump_json()
    _, other = issue_key("globex", "", KeyScope())
    await store.put(other)
    assert [k.id for k in await store.list("acme")] == [key.id]
    assert {k.id for k in await store.list()} == {key.id, other.id}
    revoked = key.model_copy(update={"revoked_at": time.time()})
    await store.put(revoked)
    assert await store.by_digest(key.digest) == revoked
    await store.put_tenant("initech", {"default_tier": "medium"})
    assert await store.tenants() == {"initech": {"default_tier": "medium"}}
    assert await store.delete_tenant("initech") is True
    assert await store.delete_tenant("initech") is False
    await store.touch({key.id: 20.0})
    await store.touch({key.id: 10.0})  # an older flush never moves last use back
    assert await store.last_used() == {key.id: 20.0}


async def test_redis_store_announces_writes() -> None:
    prefix = f"tgtest-kd-{uuid.uuid4().hex[:12]}"
    redis = RedisStore(REDIS7_URL)
    listener, writer = RedisKeyStore(redis, prefix), RedisKeyStore(redis, prefix)
    try:
        await listener.wait_change(0.01)  # subscribes
        waiting = asyncio.ensure_future(listener.wait_change(5.0))
        began = time.monotonic()
        await writer.put(issue_key("acme", "", KeyScope())[1])
        await waiting
        assert time.monotonic() - began < 1.0
    finally:
        await listener.aclose()
        await redis.aclose()
        delete_prefix(REDIS7_URL, prefix + ":")


def directory(store: KeyStore, **kwargs: float) -> KeyDirectory:
    return KeyDirectory(store, CONFIG, KeyRing({}), **kwargs)


async def test_poll_drops_a_revoked_key_without_any_message() -> None:
    """Two replicas over one store; the one that did not revoke hears nothing but the poll."""
    shared = MemoryKeyStore()  # its wait_change only sleeps: the poll path alone
    a, b = directory(shared, poll_s=0.05), directory(shared, poll_s=0.05)
    raw, key = issue_key("acme", "", KeyScope())
    await shared.put(key)
    pollers = [asyncio.ensure_future(d.run()) for d in (a, b)]
    try:
        await asyncio.sleep(0.1)
        assert (await b.authenticate(raw)) is not None  # cached on b now
        await shared.put(key.model_copy(update={"revoked_at": time.time()}))
        a.changed()
        began = time.monotonic()
        while await b.authenticate(raw) is not None:
            assert time.monotonic() - began < 0.5
            await asyncio.sleep(0.005)
        assert await a.authenticate(raw) is None
    finally:
        for poller in pollers:
            poller.cancel()
        await asyncio.gather(*pollers, return_exceptions=True)


async def test_cache_is_not_trusted_past_max_stale() -> None:
    """A replica whose poller stalls stops trusting its cache after ``max_stale_s``."""
    shared = MemoryKeyStore()
    stalled = directory(shared, max_stale_s=0.3)
    raw, key = issue_key("acme", "", KeyScope())
    await shared.put(key)
    await stalled.refresh()  # one poll, then none
    assert await stalled.authenticate(raw) is not None
    await shared.put(key.model_copy(update={"revoked_at": time.time()}))
    began = time.monotonic()
    while await stalled.authenticate(raw) is not None:
        assert time.monotonic() - began < 0.3 + 0.2
        await asyncio.sleep(0.01)
    assert time.monotonic() - began >= 0.2  # the cache did serve until close to the bound


async def test_expiry_is_checked_on_every_hit() -> None:
    shared = MemoryKeyStore()
    d = directory(shared)
    raw, key = issue_key("acme", "", KeyScope(expires_at=time.time() + 0.2))
    await shared.put(key)
    await d.refresh()
    assert await d.authenticate(raw) is not None
    await asyncio.sleep(0.25)
    assert await d.authenticate(raw) is None


async def test_unknown_and_runtime_tenants() -> None:
    shared = MemoryKeyStore()
    d = directory(shared)
    await d.refresh()
    raw, key = issue_key("late", "", KeyScope())
    await shared.put(key)
    assert await d.authenticate(raw) is None  # no such tenant
    await shared.put_tenant("late", {"default_tier": "medium"})
    principal = await d.authenticate(raw)  # loads the new tenant on the miss
    assert principal is not None and principal.policy.default_tier == "medium"
    assert principal.tenant == "late" and principal.key_id == key.id


def test_scoped_policy_narrows_tiers() -> None:
    acme = CONFIG.tenants["acme"]
    _, any_tier = issue_key("acme", "", KeyScope())
    assert scoped_policy(CONFIG, acme, any_tier) is acme
    _, small = issue_key("acme", "", KeyScope(allowed_tiers=("small", "large")))
    assert scoped_policy(CONFIG, acme, small).allowed_tiers == ("small", "large")
    _, models = issue_key("acme", "", KeyScope(allowed_models=("fake-medium",)))
    assert scoped_policy(CONFIG, acme, models).allowed_tiers == ("medium",)
    tenant = runtime_tenant({"allowed_tiers": ["medium", "large"]})
    assert scoped_policy(CONFIG, tenant, small).allowed_tiers == ("large",)
    assert tenant.keys == ()


class UnreachableKeyStore(MemoryKeyStore):
    """The in-process store with its reads failing as Redis's do when it is down."""

    async def by_digest(self, digest: str) -> ManagedKey | None:
        raise StoreUnavailable("redis hget: Connection refused")

    async def version(self) -> int:
        raise StoreUnavailable("redis get: Connection refused")


async def test_store_down_refuses_managed_keys_but_not_yaml_ones() -> None:
    config = GatewayConfig.model_validate(
        {**fake_config(), "tenants": {"acme": {"keys": [{"id": "y", "sha256": hash_key("tg-y")}]}}}
    )
    d = KeyDirectory(UnreachableKeyStore(), config, KeyRing.from_config(config))
    with pytest.raises(StoreUnavailable):
        await d.refresh()
    with pytest.raises(StoreUnavailable):
        await d.authenticate("tg-some-managed-key")
    principal = await d.authenticate("tg-y")
    assert principal is not None and principal.key_id == "y"


class CountingKeyStore(MemoryKeyStore):
    """The in-process store, counting lookups by digest (the hot path's round trips)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    async def by_digest(self, digest: str) -> ManagedKey | None:
        self.lookups += 1
        return await super().by_digest(digest)


async def test_one_round_trip_per_miss_and_none_for_repeats() -> None:
    store = CountingKeyStore()
    d = directory(store)
    raw, key = issue_key("acme", "", KeyScope())
    await store.put(key)
    await d.refresh()
    for _ in range(3):
        assert await d.authenticate(raw) is not None
        assert await d.authenticate("tg-wrong") is None
    assert store.lookups == 2  # one for the key, one for the wrong one; then the caches
    await store.put(key.model_copy(update={"revoked_at": time.time()}))
    await d.refresh()  # the version moved: both caches dropped
    for _ in range(3):
        assert await d.authenticate(raw) is None
    assert store.lookups == 3
