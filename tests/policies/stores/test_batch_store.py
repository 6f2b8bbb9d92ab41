"""The batch store contract, the same assertions in process, on a real Redis and on a
real 3-master Redis Cluster: files within a tenant's bytes, batches within its limits,
a line's result written once, the status machine's moves, the shared queue with
claiming of a silent consumer's lines, expiry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from policies.batches_spec import BatchLimits
from policies.stores.batch_memory import MemoryBatchStore
from policies.stores.batch_records import (
    CANCELLING,
    COMPLETED,
    IN_PROGRESS,
    VALIDATING,
    BatchRecord,
    BatchStore,
    FileRecord,
    LineResult,
)
from policies.stores.batch_redis import RedisBatchStore
from tests.redis_servers import REDIS7_URL, redis_store


@pytest.fixture(params=["memory", "redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[BatchStore]:
    if request.param == "memory":
        yield MemoryBatchStore()
        return
    url = REDIS7_URL if request.param == "redis" else request.getfixturevalue("redis_cluster").url
    async with redis_store(url, cluster=request.param == "cluster", timeout_s=5.0) as owner:
        yield RedisBatchStore(owner)


def a_file(file_id: str, size: int, tenant: str = "acme", expires: int | None = None) -> FileRecord:
    return FileRecord(file_id, tenant, size, 100, "in.jsonl", "batch", expires)


def a_batch(batch_id: str, total: int, tenant: str = "acme") -> BatchRecord:
    return BatchRecord(
        id=batch_id,
        tenant=tenant,
        key_id="acme-1",
        key_digest="d" * 64,
        api="openai",
        endpoint="/v1/chat/completions",
        created_at=100,
        expires_at=10_000,
        total=total,
    )


async def test_files_stay_within_the_tenants_bytes(store: BatchStore) -> None:
    assert await store.add_file(a_file("file-a", 60), b"x" * 60, limit=100)
    assert not await store.add_file(a_file("file-b", 50), b"y" * 50, limit=100)
    assert await store.file("acme", "file-b") is None  # a refusal leaves nothing behind
    assert await store.add_file(a_file("file-a", 60), b"x" * 60, limit=100)  # same id: no-op
    assert await store.add_file(a_file("file-g", 50, tenant="globex"), b"g" * 50, limit=100)
    assert [f.id for f in await store.files("acme")] == ["file-a"]
    assert await store.file_content("acme", "file-a") == b"x" * 60
    assert await store.file("globex", "file-a") is None  # another tenant's file is not there
    removed = await store.remove_file("acme", "file-a")
    assert removed is not None and removed.bytes == 60
    assert await store.file_content("acme", "file-a") is None
    assert await store.remove_file("acme", "file-a") is None
    assert await store.add_file(a_file("file-b", 50), b"y" * 50, limit=100)  # bytes came back


async def test_batches_stay_within_the_tenants_limits(store: BatchStore) -> None:
    limits = BatchLimits(open_batches=2, lines=10)
    assert await store.add_batch(a_batch("batch_1", 6), limits) is None
    assert await store.add_batch(a_batch("batch_2", 6), limits) == "lines"
    assert await store.add_batch(a_batch("batch_2", 4), limits) is None
    assert await store.add_batch(a_batch("batch_3", 1), limits) == "open_batches"
    assert await store.batch("acme", "batch_3") is None
    assert sorted(o for _, o in await store.open_batches()) == ["batch_1", "batch_2"]
    ended, moved = await store.move("acme", "batch_1", [VALIDATING], "failed", 200, keep_s=50)
    assert moved and ended is not None and ended.status == "failed" and ended.ended_at == 200
    assert [o for _, o in await store.open_batches()] == ["batch_2"]
    assert await store.add_batch(a_batch("batch_3", 6), limits) is None  # room again
    assert await store.due(249) == []
    assert await store.due(250) == [("acme", "batch", "batch_1")]
    assert await store.remove_batch("acme", "batch_1")
    assert await store.batch("acme", "batch_1") is None


async def test_a_lines_result_is_written_once_and_counted(store: BatchStore) -> None:
    await store.add_batch(a_batch("batch_1", 3), BatchLimits())
    bad = LineResult("e", b'{"custom_id":null}')
    await store.add_lines("acme", "batch_1", {0: b'{"a":0}', 2: b'{"a":2}'}, [(1, bad)])
    moved, did = await store.move("acme", "batch_1", [VALIDATING], IN_PROGRESS, 110)
    assert did and moved is not None and moved.in_progress_at == 110
    assert await store.move("acme", "batch_1", [VALIDATING], IN_PROGRESS, 120) == (moved, False)
    take = await store.take("acme", "batch_1", 0, now=200)
    assert take.action == "run" and take.line == b'{"a":0}'
    assert await store.unfinished("acme", "batch_1") == [0, 2]
    answer = LineResult("o", b'{"custom_id":"a"}', cost_nano=30, saved_nano=30, prompt_tokens=3)
    assert await store.finish("acme", "batch_1", 0, answer) == (True, False)
    again = LineResult("o", b'{"custom_id":"b"}', cost_nano=99)
    assert await store.finish("acme", "batch_1", 0, again) == (False, False)  # once
    assert (await store.take("acme", "batch_1", 0, now=200)).action == "done"
    assert (await store.take("acme", "batch_1", 2, now=20_000)).action == "expire"
    expired = LineResult("x", b'{"custom_id":"c"}')
    assert await store.finish("acme", "batch_1", 2, expired) == (True, True)
    record = await store.batch("acme", "batch_1")
    assert record is not None
    assert (record.completed, record.failed, record.expired, record.done) == (1, 1, 1, 3)
    assert (record.cost_nano, record.saved_nano, record.prompt_tokens) == (30, 30, 3)
    results = await store.results("acme", "batch_1")
    assert results == {0: answer.encoded(), 1: bad.encoded(), 2: expired.encoded()}
    assert await store.unfinished("acme", "batch_1") == []
    await store.move("acme", "batch_1", [IN_PROGRESS], CANCELLING, 300)
    unmoved, did = await store.move("acme", "batch_1", [IN_PROGRESS], COMPLETED, 310)
    assert not did and unmoved is not None and unmoved.status == CANCELLING
    assert await store.move("acme", "batch_9", [IN_PROGRESS], COMPLETED, 310) == (None, False)
    await store.drop_lines("acme", "batch_1")
    assert await store.results("acme", "batch_1") == {}
    assert (await store.take("acme", "batch_2", 0, now=0)).action == "gone"


async def test_the_queue_hands_a_silent_consumers_lines_to_another(store: BatchStore) -> None:
    await store.queue.enqueue("acme", "batch_1", [0, 1, 2])
    assert await store.queue.queued() == 3
    first = await store.queue.read("alpha", 2)
    assert [(q.batch_id, q.index) for q in first] == [("batch_1", 0), ("batch_1", 1)]
    assert await store.queue.queued() == 1
    assert [q.index for q in await store.queue.read("beta", 5)] == [2]
    assert await store.queue.queued() == 0 and await store.queue.read("beta", 5) == []
    await store.queue.ack([first[0].entry])
    await asyncio.sleep(0.3)
    await store.queue.touch("alpha", [first[1].entry])  # alpha still beats for line 1
    claimed = await store.queue.claim("beta", 0.2, 10)
    assert [c.index for c in claimed] == [2]  # beta's own silent line, not alpha's
    await store.queue.ack([c.entry for c in claimed])
    await asyncio.sleep(0.3)  # alpha went silent
    claimed = await store.queue.claim("beta", 0.2, 10)
    assert [(c.entry, c.index) for c in claimed] == [(first[1].entry, 1)]
    await store.queue.ack([c.entry for c in claimed])
    assert await store.queue.claim("gamma", 0.0, 10) == []
    assert await store.queue.queued() == 0


@pytest.mark.parametrize("cluster", [False, True])
async def test_a_queue_whose_stream_was_lost_makes_its_group_again(
    request: pytest.FixtureRequest, cluster: bool
) -> None:
    """As Redis restarted empty leaves it: the next read meets ``NOGROUP``, makes the group
    again under a new generation and reads on (before: ``NOGROUP`` for the process's life)."""
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    async with redis_store(url, cluster=cluster, timeout_s=5.0) as owner:
        queue = RedisBatchStore(owner).queue
        first = await queue.enqueue("acme", "batch_1", [0])
        assert await queue.generation() == first
        await queue.read("alpha", 5)
        await asyncio.sleep(0.01)
        await owner.call("lose", owner.client.delete, queue.queue_key)
        assert await queue.read("alpha", 5) == []  # not an error
        second = await queue.generation()
        assert second > first
        assert await queue.enqueue("acme", "batch_2", [0]) == second
        assert [q.batch_id for q in await queue.read("alpha", 5)] == ["batch_2"]
        assert await queue.queued() == 0
