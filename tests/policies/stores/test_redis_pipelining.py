"""Single commands of one loop turn share a pipeline, and every caller still gets its own
reply or its own error (a real Redis 7; a port where nothing listens)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from policies.stores.redis_coalesce import CoalescingRedis
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore
from tests.redis_servers import REDIS7_URL
from tiergate_testing.net import free_port


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    owner = RedisStore(REDIS7_URL, root=f"tgtest{uuid.uuid4().hex[:8]}", timeout_s=2.0)
    yield owner
    await owner.delete(*[k.decode() async for k in owner.client.scan_iter(f"{owner.root}*")])
    await owner.aclose()


def _pipelines(client: CoalescingRedis) -> list[int]:
    """Record how many commands each pipeline the client sends carries."""
    sizes: list[int] = []
    send = client._pipeline

    async def counted(queued: list[tuple[object, object, asyncio.Future[object]]]) -> None:
        sizes.append(len(queued))
        await send(queued)

    client._pipeline = counted  # type: ignore[method-assign]
    return sizes


async def test_one_turns_commands_go_as_one_pipeline_each_with_its_reply(
    store: RedisStore,
) -> None:
    assert isinstance(store.client, CoalescingRedis)
    sizes = _pipelines(store.client)
    key = store.keys("co")
    await asyncio.gather(*(store.set(f"{key}:{i}", str(i).encode()) for i in range(50)))
    counts = [store.client.hincrby(f"{key}:h", "n", 1) for _ in range(30)]
    values = [store.get(f"{key}:{i}") for i in range(50)]
    gathered = await asyncio.gather(*counts, *values)
    assert sorted(gathered[:30]) == list(range(1, 31))  # every increment, each its own reply
    assert gathered[30:] == [str(i).encode() for i in range(50)]
    assert await store.hgetall(f"{key}:h") == {"n": b"30"}
    assert sizes == [50, 80, 1]  # one pipeline per turn: 50 sets, 80 commands, the hgetall


async def test_one_commands_error_is_its_callers_alone(store: RedisStore) -> None:
    key = store.keys("co")
    await store.set(f"{key}:text", b"not a hash")
    wrong = store.call("hget", store.client.hget, f"{key}:text", "field")
    fine = [store.set(f"{key}:{i}", b"v") for i in range(5)]
    results = await asyncio.gather(wrong, *fine, return_exceptions=True)
    assert isinstance(results[0], StoreUnavailable)
    assert "WRONGTYPE" in str(results[0].__cause__)
    assert results[1:] == [None] * 5
    assert await store.get(f"{key}:4") == b"v"
    with pytest.raises(StoreUnavailable) as alone:  # alone in its turn: no pipeline
        await store.call("hget", store.client.hget, f"{key}:text", "field")
    assert "WRONGTYPE" in str(alone.value.__cause__)


async def test_a_script_missing_on_the_server_is_loaded_inside_a_pipeline(
    store: RedisStore,
) -> None:
    script = store.script(f"return ARGV[1] .. '{uuid.uuid4().hex}'")  # never loaded before
    replies = await asyncio.gather(*(script("echo", [], [str(i)]) for i in range(10)))
    assert [r.decode()[: len(str(i))] for i, r in enumerate(replies)] == [str(i) for i in range(10)]
    alone = store.script(f"return ARGV[1] .. '{uuid.uuid4().hex}'")
    assert (await alone("echo", [], ["alone"])).startswith(b"alone")  # no pipeline: alone


async def test_a_cancelled_caller_leaves_the_others_their_replies(store: RedisStore) -> None:
    key = store.keys("co")
    await store.set(f"{key}:a", b"1")
    doomed = asyncio.ensure_future(store.get(f"{key}:a"))
    others = [asyncio.ensure_future(store.get(f"{key}:a")) for _ in range(5)]
    await asyncio.sleep(0)  # all queued in this turn
    doomed.cancel()
    assert await asyncio.gather(*others) == [b"1"] * 5
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert await store.get(f"{key}:a") == b"1"  # the connection is still in step


async def test_an_unreachable_server_fails_every_caller_as_store_unavailable() -> None:
    dead = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    try:
        results = await asyncio.gather(
            *(dead.get(f"k{i}") for i in range(8)), return_exceptions=True
        )
        assert all(isinstance(r, StoreUnavailable) for r in results)
        assert len({id(r.__cause__) for r in results}) == 8  # one exception per caller
    finally:
        await dead.aclose()


async def test_blocking_readers_and_switched_off_stores_send_commands_alone(
    store: RedisStore,
) -> None:
    reader = store.sibling(timeout_s=2.0, blocking=True)
    plain = RedisStore(REDIS7_URL, timeout_s=2.0, coalesce=False)
    try:
        assert not isinstance(reader.client, CoalescingRedis)
        assert not isinstance(plain.client, CoalescingRedis)
        assert isinstance(store.sibling(timeout_s=0.1).client, CoalescingRedis)
        stream = store.keys("co") + ":stream"
        blocked = asyncio.ensure_future(
            reader.call("xread", reader.client.xread, {stream: "$"}, block=1000)
        )
        await asyncio.sleep(0.05)
        await store.client.xadd(stream, {"f": "v"})  # not held behind the blocked read
        reply = await asyncio.wait_for(blocked, 2.0)
        assert reply and reply[0][1][0][1] == {b"f": b"v"}
    finally:
        await reader.aclose()
        await plain.aclose()
