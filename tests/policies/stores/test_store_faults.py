"""Every Redis failure reaches the callers as ``StoreUnavailable``, never as a redis exception:
a real Redis at ``maxmemory`` with ``noeviction`` (OOM), a real read-only replica
(READONLY), and a port where nothing listens, for every store built on the owner."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import redis

from gateway.admin.session import DashboardSessions
from policies.schema import BudgetSpec, RateLimitSpec
from policies.stores.budget import GLOBAL_SCOPE, Reservation, Scope, tenant_scope
from policies.stores.budget_redis import RedisBudgetStore
from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.storage import CacheUnavailable, Semantic
from policies.stores.cache.streamindex import StreamIndexStorage
from policies.stores.cache.vectorsets import VectorSetStorage
from policies.stores.ledger import SpendEvent
from policies.stores.ledger_redis import RedisLedger
from policies.stores.ratelimit import RateScope
from policies.stores.ratelimit_redis import RedisRateLimiter
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore
from tests.redis_servers import RedisProcess
from tiergate_testing.net import free_port


@pytest.fixture(scope="module")
def full_redis() -> Iterator[RedisProcess]:
    """Redis 8 at its ``maxmemory`` with ``noeviction``: every write answers OOM."""
    server = RedisProcess("--maxmemory-policy", "noeviction")
    server.start()
    client = redis.Redis(port=server.port)
    try:
        for i in range(64):
            client.set(f"fill:{i}", b"x" * 65_536)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", used // 2)  # well past it, whatever buffers come and go
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.set("one-more", b"x")
    finally:
        client.close()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def read_only_redis() -> Iterator[RedisProcess]:
    """A replica of another Redis: every write answers READONLY."""
    primary = RedisProcess()
    primary.start()
    replica = RedisProcess("--replicaof", "127.0.0.1", str(primary.port))
    replica.start()
    yield replica
    replica.stop()
    primary.stop()


@dataclass
class Stores:
    owner: RedisStore
    budgets: RedisBudgetStore
    ledger: RedisLedger
    limiter: RedisRateLimiter
    sessions: DashboardSessions
    stream_cache: StreamIndexStorage
    vector_cache: VectorSetStorage


@pytest.fixture(params=["oom", "readonly", "down"])
async def faulty(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    if request.param == "oom":
        url = request.getfixturevalue("full_redis").url
    elif request.param == "readonly":
        url = request.getfixturevalue("read_only_redis").url
    else:
        url = f"redis://127.0.0.1:{free_port()}/0"
    owner = RedisStore(url, root=f"tgfault-{uuid.uuid4().hex[:8]}", timeout_s=0.3)
    ledger = RedisLedger(owner)
    cache_owner = owner.sibling(timeout_s=0.3)
    stores = Stores(
        owner=owner,
        budgets=RedisBudgetStore(ledger),
        ledger=ledger,
        limiter=RedisRateLimiter(owner),
        sessions=DashboardSessions(owner, 60),
        stream_cache=StreamIndexStorage(cache_owner, root=owner.keys("cache"), maxlen=1000),
        vector_cache=VectorSetStorage(owner.sibling(timeout_s=0.3)),
    )
    yield stores
    await stores.stream_cache.aclose()
    await stores.vector_cache.aclose()
    await owner.aclose()


SCOPES = [Scope(GLOBAL_SCOPE, None), Scope(tenant_scope("acme"), BudgetSpec(limit_usd=1.0))]
HELD = Reservation("r-held", 0.1, 0, ("global|total", "tenant:acme|d:2026-01-01"))
EVENT = SpendEvent(time.time(), "r-held", "acme", "k1", "small", "m", cost_usd=0.1)
RATE = [RateScope("tenant:acme", RateLimitSpec(requests_per_minute=5, tokens_per_minute=100))]
VECTOR = np.ones(8, dtype=np.float32) / np.sqrt(8)


def writes(s: Stores) -> dict[str, Callable[[], Awaitable[Any]]]:
    keys = CacheKeys(s.owner.keys("cache"), "acme")
    semantic = Semantic("p", "text", VECTOR)
    return {
        "store set": lambda: s.owner.set(s.owner.keys("x") + ":k", b"v"),
        "store incrbyfloat": lambda: s.owner.incrbyfloat(s.owner.keys("x") + ":n", 1.0),
        "store hincrbyfloat": lambda: s.owner.hincrbyfloat(s.owner.keys("x") + ":h", "f", 1.0),
        "budget reserve": lambda: s.budgets.reserve("r1", SCOPES, [0.2]),
        "budget settle": lambda: s.budgets.settle(HELD, 0.1, EVENT),
        "budget set_limit": lambda: s.budgets.set_limit("tenant:acme", None),
        "ledger record": lambda: s.ledger.record(EVENT),
        "rate acquire": lambda: s.limiter.acquire("r1", RATE, 10),
        "session create": lambda: s.sessions.create("digest"),
        "cache put (stream)": lambda: s.stream_cache.put(keys, "d", b"r", semantic, 60, 10),
        "cache put (vector set)": lambda: s.vector_cache.put(keys, "d", b"r", semantic, 60, 10),
        "cache flush": lambda: s.stream_cache.flush(keys),
    }


def reads(s: Stores) -> dict[str, Callable[[], Awaitable[Any]]]:
    keys = CacheKeys(s.owner.keys("cache"), "acme")
    return {
        "store get": lambda: s.owner.get(s.owner.keys("x") + ":k"),
        # Writes only when it finds the request's entry, which a faulty server never got.
        "rate correct": lambda: s.limiter.correct("r1", RATE, 10, 20),
        "budget status": lambda: s.budgets.status(SCOPES),
        "budget holds": lambda: s.budgets.active_holds(),
        "ledger events": lambda: s.ledger.events(0, time.time()),
        "session valid": lambda: s.sessions.valid("token", "digest"),
        "cache get": lambda: s.stream_cache.get(keys, "d"),
        "cache candidates": lambda: s.vector_cache.candidates(keys, "p", VECTOR, 3),
    }


async def test_every_failed_write_is_store_unavailable(faulty: Stores) -> None:
    answered = []
    for name, op in writes(faulty).items():
        try:
            await op()
        except StoreUnavailable as exc:
            assert isinstance(exc.__cause__, redis.RedisError | OSError), name
            assert isinstance(exc, CacheUnavailable) or not name.startswith("cache"), name
        else:
            answered.append(name)
    assert answered == []


async def test_reads_answer_or_raise_store_unavailable_only(
    faulty: Stores, request: pytest.FixtureRequest
) -> None:
    """A read (or a no-op write) may still work under OOM and READONLY; it never leaks a
    redis error."""
    down = "down" in request.node.callspec.id
    for name, op in reads(faulty).items():
        try:
            await op()
        except StoreUnavailable:
            continue
        assert not down, f"{name} answered with no server"
    assert await faulty.owner.ping() is (not down)
