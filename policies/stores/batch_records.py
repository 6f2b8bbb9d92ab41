"""Batch jobs in the shared store: the records, and the contract both stores keep.

A tenant's files and batches live together (on Redis: one hash tag per tenant, so a
batch's record, its lines, their results and the tenant's usage change in one script):

- ``FileRecord``: an uploaded file (``purpose: batch``) or one a batch wrote
  (``batch_output``); its bytes in the store, or in the S3 bucket (``location``).
- ``BatchRecord``: a batch (OpenAI's or Anthropic's: ``api``), its status, its counts,
  what its lines cost and saved, flat string fields so a script can move its status.
- per line: its input (until it has a result) and its result, written once (``finish``
  reports whether this call wrote it): the line's answer is kept once however many
  replicas ran it.
- the queue (``store.queue``, ``policies/stores/batch_queue.py``): every runnable line,
  once, in one queue every replica reads.

``MemoryBatchStore`` (``policies/stores/batch_memory.py``) keeps the contract in this
process, ``RedisBatchStore`` (``policies/stores/batch_redis.py``) on Redis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

import orjson

from policies.batches_spec import BatchLimits
from policies.stores.batch_queue import LineQueue

R = TypeVar("R")

# Status words (OpenAI's; Anthropic's ``processing_status`` is read from them).
VALIDATING, IN_PROGRESS, FINALIZING = "validating", "in_progress", "finalizing"
COMPLETED, FAILED, EXPIRED = "completed", "failed", "expired"
CANCELLING, CANCELLED = "cancelling", "cancelled"
ENDED = frozenset({COMPLETED, FAILED, EXPIRED, CANCELLED})
# A line's result kind → the record's count it adds to.
LINE_COUNTS = {"o": "completed", "e": "failed", "c": "cancelled", "x": "expired"}


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    tenant: str
    bytes: int
    created_at: int
    filename: str
    purpose: str  # batch | batch_output
    expires_at: int | None = None
    location: str = "store"  # store | s3

    def fields(self) -> dict[str, str]:
        return _flat(self)

    @classmethod
    def from_fields(cls, raw: Mapping[str, str]) -> FileRecord:
        return _unflat(cls, raw)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch. Counts are of lines with a result; ``total`` of every line, bad ones
    included (they have their result, an error line, from the start)."""

    id: str
    tenant: str
    key_id: str
    key_digest: str  # the creating key's SHA-256: its lines run as that key
    api: str  # openai | anthropic
    endpoint: str
    created_at: int
    expires_at: int
    status: str = VALIDATING
    input_file_id: str = ""
    completion_window: str = "24h"
    metadata: str = ""  # JSON, or empty
    errors: str = ""  # JSON list of OpenAI's batch errors, or empty
    output_file_id: str = ""
    error_file_id: str = ""
    output_ttl_s: int = 0  # how long its output and error files are kept (0: the default)
    in_progress_at: int = 0
    finalizing_at: int = 0
    completed_at: int = 0
    failed_at: int = 0
    expired_at: int = 0
    cancelling_at: int = 0
    cancelled_at: int = 0
    ended_at: int = 0
    queued: int = 0  # once every runnable line is in the queue: the queue's generation then
    total: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    expired: int = 0
    cost_nano: int = 0  # what its lines were charged, nano-USD
    saved_nano: int = 0  # their interactive price minus that
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def done(self) -> int:
        return self.completed + self.failed + self.cancelled + self.expired

    def fields(self) -> dict[str, str]:
        return _flat(self)

    @classmethod
    def from_fields(cls, raw: Mapping[str, str]) -> BatchRecord:
        return _unflat(cls, raw)

    def meta(self) -> dict[str, str] | None:
        return orjson.loads(self.metadata) if self.metadata else None


@dataclass(frozen=True, slots=True)
class LineResult:
    """What one line came to: its kind (``o`` answered, ``e`` error, ``c`` cancelled,
    ``x`` expired), the line as the batch's results show it, and its money."""

    kind: str
    line: bytes
    cost_nano: int = 0
    saved_nano: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    def encoded(self) -> bytes:
        return self.kind.encode() + self.line

    @staticmethod
    def decode(raw: bytes) -> tuple[str, bytes]:
        return raw[:1].decode(), raw[1:]


@dataclass(frozen=True, slots=True)
class Take:
    """What a runner is to do with a queued line: ``run`` it (``line``: its input),
    ``cancel`` or ``expire`` it (its batch was cancelled or ran out of time), or nothing
    (``done``: it has its result; ``gone``: its batch is no more)."""

    action: str  # run | cancel | expire | done | gone
    line: bytes = b""
    batch: BatchRecord | None = None


def line_action(record: BatchRecord, now: int) -> str:
    """What becomes of a runnable line of ``record`` taken at ``now``."""
    if record.status in (CANCELLING, CANCELLED, FAILED):
        return "cancel"
    if now >= record.expires_at or record.status == EXPIRED:
        return "expire"
    return "run"


class BatchStore(Protocol):
    @property
    def queue(self) -> LineQueue:
        """Every runnable line, shared by the replicas."""
        ...

    # files
    async def add_file(self, record: FileRecord, content: bytes | None, limit: int) -> bool:
        """Keep the file (its bytes too, unless they are in the bucket) if the tenant's
        files stay within ``limit`` bytes; adding an id that exists is a no-op (True)."""
        ...

    async def file(self, tenant: str, file_id: str) -> FileRecord | None: ...

    async def file_content(self, tenant: str, file_id: str) -> bytes | None: ...

    async def files(self, tenant: str) -> list[FileRecord]:
        """In the order they were added."""
        ...

    async def remove_file(self, tenant: str, file_id: str) -> FileRecord | None: ...

    # batches
    async def add_batch(self, record: BatchRecord, limits: BatchLimits) -> str | None:
        """Keep a new batch (``validating``), counting it against the tenant's limits;
        the limit it would pass (``open_batches``, ``lines``), or None."""
        ...

    async def add_lines(
        self,
        tenant: str,
        batch_id: str,
        lines: Mapping[int, bytes],
        results: Sequence[tuple[int, LineResult]],
    ) -> None:
        """The batch's runnable lines (index → input), and the results (``(index,
        LineResult)``) of the lines that will not run (bad input)."""
        ...

    async def batch(self, tenant: str, batch_id: str) -> BatchRecord | None: ...

    async def batches(self, tenant: str) -> list[BatchRecord]:
        """In the order they were added."""
        ...

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
        """Move the batch to ``to`` if its status is one of ``sources`` (stamping ``to``'s
        time field with ``at``, and ``changes``): the record as it is afterwards (None: no
        such batch) and whether this call moved it. An ended status gives its lines back
        to the tenant's limits and keeps the record ``keep_s`` more."""
        ...

    async def take(self, tenant: str, batch_id: str, index: int, now: int) -> Take: ...

    async def finish(
        self, tenant: str, batch_id: str, index: int, result: LineResult
    ) -> tuple[bool, bool]:
        """Write the line's result unless it has one: (written, every line has one)."""
        ...

    async def results(self, tenant: str, batch_id: str) -> dict[int, bytes]:
        """Every result so far (index → ``LineResult.encoded()``)."""
        ...

    async def unfinished(self, tenant: str, batch_id: str) -> list[int]:
        """The indices of lines still waiting for a result."""
        ...

    async def drop_lines(self, tenant: str, batch_id: str) -> None:
        """Forget the inputs and results (once the output files hold them)."""
        ...

    async def remove_batch(self, tenant: str, batch_id: str) -> bool: ...

    async def open_batches(self) -> list[tuple[str, str]]:
        """(tenant, batch id) of every batch not yet ended, every tenant's."""
        ...

    async def due(self, now: int) -> list[tuple[str, str, str]]:
        """(tenant, ``file`` | ``batch``, id) of what has expired."""
        ...


def _flat(record: Any) -> dict[str, str]:
    out = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if value is None:
            continue
        out[f.name] = str(value)
    return out


def _unflat(cls: type[R], raw: Mapping[str, str]) -> R:
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in raw:
            continue
        text = raw[f.name]
        values[f.name] = int(text) if f.type in ("int", "int | None") else text
    return cls(**values)
