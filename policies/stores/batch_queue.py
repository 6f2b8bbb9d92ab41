"""The batch line queue: every runnable line once, read by every replica.

A line a replica took is its own until it acknowledges it (its result is written), or
stops beating for it (``touch``) for ``idle_s`` and another replica claims it: the lines
of a replica that died are taken over. ``MemoryLineQueue`` keeps the contract in this
process; ``RedisLineQueue`` (``policies/stores/batch_queue_redis.py``) is one Redis stream
with one consumer group.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class QueuedLine:
    entry: str  # the queue's id for this delivery
    tenant: str
    batch_id: str
    index: int


class LineQueue(Protocol):
    async def enqueue(self, tenant: str, batch_id: str, indices: Sequence[int]) -> int:
        """Queue the lines; the queue's generation they were queued under."""
        ...

    async def generation(self) -> int:
        """Changes when the queue lost what it held (its store restarted empty): lines
        queued under an older one must be queued again."""
        ...

    async def read(self, consumer: str, count: int) -> list[QueuedLine]:
        """Lines nobody took yet; now ``consumer``'s."""
        ...

    async def claim(self, consumer: str, idle_s: float, count: int) -> list[QueuedLine]:
        """Lines a consumer took and has not beaten for in ``idle_s`` (its own included)."""
        ...

    async def touch(self, consumer: str, entries: Sequence[str]) -> None:
        """The consumer still holds these (its heartbeat)."""
        ...

    async def ack(self, entries: Sequence[str]) -> None: ...

    async def queued(self) -> int:
        """Lines in the queue nobody has taken yet."""
        ...


@dataclass(slots=True)
class _Held:
    line: QueuedLine
    consumer: str
    beat: float


class MemoryLineQueue:
    """Per delivered line, who holds it and when it last beat."""

    def __init__(self) -> None:
        self._queue: deque[QueuedLine] = deque()
        self._held: dict[str, _Held] = {}
        self._ids = itertools.count(1)

    async def enqueue(self, tenant: str, batch_id: str, indices: Sequence[int]) -> int:
        for index in indices:
            self._queue.append(QueuedLine(str(next(self._ids)), tenant, batch_id, index))
        return 1

    async def generation(self) -> int:
        return 1  # it lives and dies with the process, and the batches with it

    async def read(self, consumer: str, count: int) -> list[QueuedLine]:
        taken: list[QueuedLine] = []
        while self._queue and len(taken) < count:
            line = self._queue.popleft()
            self._held[line.entry] = _Held(line, consumer, time.monotonic())
            taken.append(line)
        return taken

    async def claim(self, consumer: str, idle_s: float, count: int) -> list[QueuedLine]:
        now = time.monotonic()
        stale = [h for h in self._held.values() if now - h.beat >= idle_s][:count]
        for held in stale:
            held.consumer, held.beat = consumer, now
        return [h.line for h in stale]

    async def touch(self, consumer: str, entries: Sequence[str]) -> None:
        now = time.monotonic()
        for entry in entries:
            held = self._held.get(entry)
            if held is not None and held.consumer == consumer:
                held.beat = now

    async def ack(self, entries: Sequence[str]) -> None:
        for entry in entries:
            self._held.pop(entry, None)

    async def queued(self) -> int:
        return len(self._queue)
