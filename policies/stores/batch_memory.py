"""Batch jobs in this process: the ``BatchStore`` contract without Redis (one replica).

Every method runs to its end on the event loop without awaiting, so each is atomic as
the Redis scripts are. Its queue is ``MemoryLineQueue`` (``policies/stores/batch_queue.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from policies.batches_spec import BatchLimits
from policies.stores.batch_queue import MemoryLineQueue
from policies.stores.batch_records import (
    ENDED,
    LINE_COUNTS,
    BatchRecord,
    FileRecord,
    LineResult,
    Take,
    line_action,
)


@dataclass(slots=True)
class _Tenant:
    files: dict[str, FileRecord] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, BatchRecord] = field(default_factory=dict)
    inputs: dict[str, dict[int, bytes]] = field(default_factory=dict)
    results: dict[str, dict[int, bytes]] = field(default_factory=dict)
    expiry: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, id) → when
    file_bytes: int = 0
    open: int = 0
    lines: int = 0


class MemoryBatchStore:
    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}
        self.queue = MemoryLineQueue()

    def _of(self, tenant: str) -> _Tenant:
        return self._tenants.setdefault(tenant, _Tenant())

    async def add_file(self, record: FileRecord, content: bytes | None, limit: int) -> bool:
        t = self._of(record.tenant)
        if record.id in t.files:
            return True
        if t.file_bytes + record.bytes > limit:
            return False
        t.file_bytes += record.bytes
        t.files[record.id] = record
        if content is not None:
            t.blobs[record.id] = content
        if record.expires_at:
            t.expiry[("file", record.id)] = record.expires_at
        return True

    async def file(self, tenant: str, file_id: str) -> FileRecord | None:
        return self._of(tenant).files.get(file_id)

    async def file_content(self, tenant: str, file_id: str) -> bytes | None:
        return self._of(tenant).blobs.get(file_id)

    async def files(self, tenant: str) -> list[FileRecord]:
        return list(self._of(tenant).files.values())  # in the order they came

    async def remove_file(self, tenant: str, file_id: str) -> FileRecord | None:
        t = self._of(tenant)
        record = t.files.pop(file_id, None)
        if record is not None:
            t.file_bytes -= record.bytes
            t.blobs.pop(file_id, None)
            t.expiry.pop(("file", file_id), None)
        return record

    async def add_batch(self, record: BatchRecord, limits: BatchLimits) -> str | None:
        t = self._of(record.tenant)
        if t.open + 1 > limits.open_batches:
            return "open_batches"
        if t.lines + record.total > limits.lines:
            return "lines"
        t.open += 1
        t.lines += record.total
        t.batches[record.id] = record
        t.inputs[record.id] = {}
        t.results[record.id] = {}
        return None

    async def add_lines(
        self,
        tenant: str,
        batch_id: str,
        lines: Mapping[int, bytes],
        results: Sequence[tuple[int, LineResult]],
    ) -> None:
        t = self._of(tenant)
        t.inputs.setdefault(batch_id, {}).update(lines)
        for index, result in results:
            self._finish(t, batch_id, index, result)

    async def batch(self, tenant: str, batch_id: str) -> BatchRecord | None:
        return self._of(tenant).batches.get(batch_id)

    async def batches(self, tenant: str) -> list[BatchRecord]:
        return list(self._of(tenant).batches.values())

    async def move(
        self,
        tenant: str,
        batch_id: str,
        sources: Sequence[str],
        to: str,
        at: int,
        changes: Mapping[str, str] | None = None,
        keep_s: float = 0.0,
    ) -> tuple[BatchRecord | None, bool]:
        t = self._of(tenant)
        record = t.batches.get(batch_id)
        if record is None or record.status not in sources:
            return record, False
        fields = {**record.fields(), **(changes or {}), "status": to, f"{to}_at": str(at)}
        if to in ENDED:
            fields["ended_at"] = str(at)
            t.open -= 1
            t.lines -= record.total
            t.expiry[("batch", batch_id)] = at + int(keep_s)
        record = t.batches[batch_id] = BatchRecord.from_fields(fields)
        return record, True

    async def take(self, tenant: str, batch_id: str, index: int, now: int) -> Take:
        t = self._of(tenant)
        record = t.batches.get(batch_id)
        if record is None:
            return Take("gone")
        if index in t.results.get(batch_id, {}):
            return Take("done", batch=record)
        line = t.inputs.get(batch_id, {}).get(index)
        if line is None:
            return Take("gone", batch=record)
        return Take(line_action(record, now), line, record)

    async def finish(
        self, tenant: str, batch_id: str, index: int, result: LineResult
    ) -> tuple[bool, bool]:
        t = self._of(tenant)
        if batch_id not in t.batches:
            return False, False
        written = self._finish(t, batch_id, index, result)
        record = t.batches[batch_id]
        return written, record.done >= record.total

    def _finish(self, t: _Tenant, batch_id: str, index: int, result: LineResult) -> bool:
        results = t.results.setdefault(batch_id, {})
        if index in results:
            return False
        results[index] = result.encoded()
        t.inputs.get(batch_id, {}).pop(index, None)
        record = t.batches[batch_id]
        count = LINE_COUNTS[result.kind]
        t.batches[batch_id] = replace(
            record,
            **{count: getattr(record, count) + 1},
            cost_nano=record.cost_nano + result.cost_nano,
            saved_nano=record.saved_nano + result.saved_nano,
            prompt_tokens=record.prompt_tokens + result.prompt_tokens,
            completion_tokens=record.completion_tokens + result.completion_tokens,
            cached_tokens=record.cached_tokens + result.cached_tokens,
        )
        return True

    async def results(self, tenant: str, batch_id: str) -> dict[int, bytes]:
        return dict(self._of(tenant).results.get(batch_id, {}))

    async def unfinished(self, tenant: str, batch_id: str) -> list[int]:
        return sorted(self._of(tenant).inputs.get(batch_id, {}))

    async def drop_lines(self, tenant: str, batch_id: str) -> None:
        t = self._of(tenant)
        t.inputs.pop(batch_id, None)
        t.results.pop(batch_id, None)

    async def remove_batch(self, tenant: str, batch_id: str) -> bool:
        t = self._of(tenant)
        record = t.batches.pop(batch_id, None)
        if record is None:
            return False
        if record.status not in ENDED:
            t.open -= 1
            t.lines -= record.total
        t.inputs.pop(batch_id, None)
        t.results.pop(batch_id, None)
        t.expiry.pop(("batch", batch_id), None)
        return True

    async def open_batches(self) -> list[tuple[str, str]]:
        return [
            (name, b.id)
            for name, t in self._tenants.items()
            for b in t.batches.values()
            if b.status not in ENDED
        ]

    async def due(self, now: int) -> list[tuple[str, str, str]]:
        return [
            (name, kind, item)
            for name, t in self._tenants.items()
            for (kind, item), when in t.expiry.items()
            if when <= now
        ]
