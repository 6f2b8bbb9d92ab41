"""What the runner's sweep makes of a batch a dead replica left, on the store contract:
an intake that died (``validating``) fails and gives the tenant its room back; lines a
dead intake never queued are queued; a batch whose lines all have results, or whose
finisher died (``finalizing``), is finished with its output and error files."""

from __future__ import annotations

import pytest

from gateway.batches.files import Files
from gateway.batches.finish import output_id
from gateway.batches.runner import sweep, tend
from policies.batches_spec import BatchesConfig, BatchLimits
from policies.stores.batch_memory import MemoryBatchStore
from policies.stores.batch_records import (
    FINALIZING,
    IN_PROGRESS,
    VALIDATING,
    BatchRecord,
    LineResult,
)

SPEC = BatchesConfig(claim_idle_s=30.0, limits=BatchLimits(open_batches=1))
NOW = 10_000


@pytest.fixture
def files() -> Files:
    return Files(SPEC, MemoryBatchStore(), None)


def record(batch_id: str, total: int, created_at: int) -> BatchRecord:
    return BatchRecord(
        id=batch_id,
        tenant="acme",
        key_id="acme-1",
        key_digest="d" * 64,
        api="openai",
        endpoint="/v1/chat/completions",
        created_at=created_at,
        expires_at=created_at + 86_400,
        total=total,
    )


async def current(files: Files, batch_id: str) -> BatchRecord:
    found = await files.store.batch("acme", batch_id)
    assert found is not None
    return found


async def test_a_dead_intake_fails_its_batch_and_frees_the_tenant(files: Files) -> None:
    store = files.store
    await store.add_batch(record("batch_v", 2, created_at=NOW - 10), SPEC.limits)
    await store.add_lines("acme", "batch_v", {0: b"{}", 1: b"{}"}, [])
    await tend(files, SPEC, await current(files, "batch_v"), NOW)
    assert (await current(files, "batch_v")).status == VALIDATING  # too young to be dead
    await tend(files, SPEC, await current(files, "batch_v"), NOW + 60)
    failed = await current(files, "batch_v")
    assert failed.status == "failed" and "validation_interrupted" in failed.errors
    assert await store.open_batches() == [] and await store.unfinished("acme", "batch_v") == []
    assert await store.add_batch(record("batch_w", 1, NOW), SPEC.limits) is None  # room again


async def test_lines_never_queued_are_queued_once(files: Files) -> None:
    store = files.store
    await store.add_batch(record("batch_q", 3, created_at=NOW - 100), SPEC.limits)
    await store.add_lines("acme", "batch_q", {0: b"{}", 1: b"{}", 2: b"{}"}, [])
    await store.move("acme", "batch_q", [VALIDATING], IN_PROGRESS, NOW - 100)
    await tend(files, SPEC, await current(files, "batch_q"), NOW)
    assert await store.queue.queued() == 3 and (await current(files, "batch_q")).queued == 1
    await tend(files, SPEC, await current(files, "batch_q"), NOW)
    assert await store.queue.queued() == 3  # not twice


async def test_a_batch_whose_finisher_died_is_finished(files: Files) -> None:
    store = files.store
    await store.add_batch(record("batch_f", 2, created_at=NOW - 100), SPEC.limits)
    answered = LineResult("o", b'{"custom_id":"a"}')
    refused = LineResult("e", b'{"custom_id":"b"}')
    await store.add_lines("acme", "batch_f", {}, [(0, answered), (1, refused)])
    await store.move("acme", "batch_f", [VALIDATING], IN_PROGRESS, NOW - 100)
    await store.move("acme", "batch_f", [IN_PROGRESS], FINALIZING, NOW - 60)
    await tend(files, SPEC, await current(files, "batch_f"), NOW)
    done = await current(files, "batch_f")
    assert done.status == "completed" and done.ended_at == NOW
    assert done.output_file_id == output_id(done, "output")
    output = await store.file_content("acme", done.output_file_id)
    errors = await store.file_content("acme", done.error_file_id)
    assert (output, errors) == (b'{"custom_id":"a"}\n', b'{"custom_id":"b"}\n')
    assert await store.results("acme", "batch_f") == {}  # the files hold them now
    keep = int(SPEC.result_ttl_s)  # the record outlives its end by this much
    assert await store.due(NOW + keep - 1) == []
    assert await store.due(NOW + keep) == [("acme", "batch", "batch_f")]


async def test_the_sweep_removes_what_has_expired(files: Files) -> None:
    store = files.store
    kept = await files.keep("acme", "in.jsonl", "batch", b"{}\n", ttl_s=60)
    await store.add_batch(record("batch_e", 1, created_at=NOW), SPEC.limits)
    await store.move("acme", "batch_e", [VALIDATING], "cancelled", NOW, keep_s=100)
    await sweep(files, SPEC, NOW + 99)
    assert await store.batch("acme", "batch_e") is not None
    await sweep(files, SPEC, NOW + 100)
    assert await store.batch("acme", "batch_e") is None
    assert kept.expires_at is not None and await store.file("acme", kept.id) is not None
    await sweep(files, SPEC, kept.expires_at)
    assert await store.file("acme", kept.id) is None
    assert await files.keep("acme", "again.jsonl", "batch", b"x" * 10, ttl_s=60)  # bytes freed
