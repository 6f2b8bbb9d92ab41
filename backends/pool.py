"""A tier's pool of engine replicas: pick one, stream through it, retry elsewhere on overload.

The in-flight count lives on the ``Replica`` (shared by every pool that names the
engine) and is bumped at pick time, because engine statistics arrive late.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from backends.base import Chunk, Engine, GenerationRequest
from backends.errors import EngineOverloaded, EngineUnavailable


@dataclass(eq=False, slots=True)
class Replica:
    engine: Engine
    max_inflight: int = 256
    inflight: int = 0

    @property
    def name(self) -> str:
        return self.engine.name

    def healthy(self) -> bool:
        return self.engine.load().healthy

    def has_room(self) -> bool:
        return self.inflight < self.max_inflight


@dataclass(slots=True)
class StreamInfo:
    """Filled in by ``EnginePool.stream``: which replica served, after how many tries."""

    replica: str | None = None
    model: str | None = None
    attempts: int = 0


class EnginePool:
    def __init__(
        self,
        tier: str,
        replicas: Sequence[Replica],
        *,
        max_waiting: int = 256,
        wait_timeout_s: float = 30.0,
    ) -> None:
        self.tier = tier
        self.replicas = tuple(replicas)
        self.max_waiting = max_waiting
        self.wait_timeout_s = wait_timeout_s
        self.waiting = 0
        self._freed = asyncio.Event()

    def models(self) -> set[str]:
        return {r.engine.model for r in self.replicas}

    def healthy(self) -> bool:
        return any(r.healthy() for r in self.replicas)

    def _candidates(self, model: str | None, exclude: set[Replica]) -> list[Replica]:
        return [
            r
            for r in self.replicas
            if r not in exclude and (model is None or r.engine.model == model) and r.healthy()
        ]

    def _score(self, replica: Replica) -> float:
        load = replica.engine.load()
        return replica.inflight + load.waiting + 2.0 * load.kv_usage

    async def _acquire(self, model: str | None, exclude: set[Replica]) -> Replica:
        """The least-loaded healthy replica with room; waits (bounded) while all are full."""
        while True:
            candidates = self._candidates(model, exclude)
            if not candidates:
                raise EngineUnavailable(f"tier {self.tier!r} has no healthy replica")
            free = [r for r in candidates if r.has_room()]
            if free:
                chosen = min(free, key=self._score)
                chosen.inflight += 1
                return chosen
            if self.waiting >= self.max_waiting:
                raise EngineOverloaded(f"tier {self.tier!r} queue is full")
            self.waiting += 1
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), self.wait_timeout_s)
            except TimeoutError:
                raise EngineOverloaded(f"tier {self.tier!r} queue wait timed out") from None
            finally:
                self.waiting -= 1

    def _release(self, replica: Replica) -> None:
        replica.inflight -= 1
        self._freed.set()

    async def stream(
        self, request: GenerationRequest, info: StreamInfo | None = None
    ) -> AsyncIterator[Chunk]:
        """Stream from one replica; before the first chunk, overload or death moves to another."""
        info = info or StreamInfo()
        tried: set[Replica] = set()
        model = request.model if request.model in self.models() else None
        while True:
            replica = await self._acquire(model, tried)
            info.replica, info.model = replica.name, replica.engine.model
            info.attempts += 1
            started = False
            try:
                async for chunk in replica.engine.stream(request):
                    started = True
                    yield chunk
                return
            except (EngineOverloaded, EngineUnavailable):
                tried.add(replica)
                if started or not self._candidates(model, tried):
                    raise
            finally:
                self._release(replica)
