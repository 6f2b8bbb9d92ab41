"""The session store's contract, in process and on a real Redis (one server, a cluster):
fields kept apart, a signal cleared only by the turn that read it, the request index,
expiry, and the bound on sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from policies.stores.sessions import MemorySessionStore, SessionStore
from policies.stores.sessions_redis import RedisSessionStore
from tests.redis_servers import REDIS7_URL, redis_store

TTL = 60.0


@pytest.fixture(params=["memory", "redis", "cluster"])
async def sessions(request: pytest.FixtureRequest) -> AsyncIterator[SessionStore]:
    if request.param == "memory":
        yield MemorySessionStore()
        return
    url, cluster = REDIS7_URL, request.param == "cluster"
    if cluster:
        url = request.getfixturevalue("redis_cluster").url
    async with redis_store(url, cluster=cluster) as owner:
        yield RedisSessionStore(owner)


async def test_a_turn_keeps_its_state_and_indexes_its_request(sessions: SessionStore) -> None:
    assert await sessions.read("s1") == {}
    assert not await sessions.note("s1", "signal", b"retried")  # no such session yet
    await sessions.write("s1", b"state-1", "req-1", None, TTL, 100)
    assert await sessions.read("s1") == {"state": b"state-1"}
    assert await sessions.session_of("req-1") == "s1"
    assert await sessions.session_of("req-unknown") is None
    assert await sessions.note("s1", "replica", b"medium\0engine-0")
    await sessions.write("s1", b"state-2", "req-2", None, TTL, 100)
    assert await sessions.read("s1") == {"state": b"state-2", "replica": b"medium\0engine-0"}


async def test_a_signal_is_cleared_by_the_turn_that_read_it_only(sessions: SessionStore) -> None:
    await sessions.write("s", b"one", "r1", None, TTL, 100)
    assert await sessions.note("s", "signal", b"bad feedback verdict")
    read = await sessions.read("s")
    assert read["signal"] == b"bad feedback verdict"
    # a newer signal arrived while the turn ran: it stays for the next turn
    assert await sessions.note("s", "signal", b"retried turn")
    await sessions.write("s", b"two", "r2", read["signal"], TTL, 100)
    assert (await sessions.read("s"))["signal"] == b"retried turn"
    await sessions.write("s", b"three", "r3", b"retried turn", TTL, 100)
    assert "signal" not in await sessions.read("s")


async def test_sessions_expire_and_beyond_the_bound_the_least_recent_go(
    sessions: SessionStore,
) -> None:
    for i in range(5):
        await sessions.write(f"s{i}", b"x", f"r{i}", None, TTL, 3)
        await asyncio.sleep(0.01)  # distinct server milliseconds: a clear order of use
    kept = [i for i in range(5) if await sessions.read(f"s{i}")]
    assert kept == [2, 3, 4]
    await sessions.write("brief", b"x", "rb", None, 0.05, 100)
    assert await sessions.read("brief") == {"state": b"x"}
    await asyncio.sleep(0.2)
    assert await sessions.read("brief") == {}
    assert await sessions.session_of("rb") is None


async def test_the_request_index_keeps_the_latest_sixteen_per_kept_session(
    sessions: SessionStore,
) -> None:
    """``max_sessions`` 1: 16 requests indexed, the oldest forgotten first (before, on
    Redis: one key per request for the TTL, 20,000 requests left 20,024 keys)."""
    for i in range(40):
        await sessions.write("s", b"x", f"q{i:02d}", None, TTL, 1)
        await asyncio.sleep(0.002)  # distinct server milliseconds: a clear order
    found = [i for i in range(40) if await sessions.session_of(f"q{i:02d}") == "s"]
    assert found == list(range(24, 40))
    if isinstance(sessions, RedisSessionStore):
        owner = sessions.store
        keys = [k async for k in owner.client.scan_iter(match=f"{sessions.prefix}:r:*")]
        assert len(keys) == 16
