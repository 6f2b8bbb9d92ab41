"""One engine replica as a pool sees it: in-flight count, health, background rebuild.

A ``Replica`` may be shared by several tiers' pools (a YAML engine named in two
tiers), so the in-flight count lives here, and so does the rebuild: when the engine
dies, a background task closes it and starts a fresh one from the same factory while
the pools route around it. Streams still running on the old engine keep their own
reference to it and end on their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from backends.base import Engine
from backends.errors import EngineError, EngineUnavailable

log = logging.getLogger(__name__)

EngineBuilder = Callable[[], Engine]


@dataclass(eq=False, slots=True)
class Replica:
    engine: Engine
    max_inflight: int = 256
    inflight: int = 0
    batch_inflight: int = 0  # of which batch lines (``EnginePool``'s priority class)
    builder: EngineBuilder | None = None
    rebuild_attempts: int = 5
    rebuild_backoff_s: float = 1.0
    give_up_cooldown_s: float = 60.0
    generation: int = 0
    rebuilds: int = 0
    _next_rebuild_at: float = 0.0
    _rebuilding: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def key(self) -> str:
        """Names this engine instance: a rebuilt replica starts with an empty KV cache."""
        return f"{self.engine.name}#{self.generation}"

    def healthy(self) -> bool:
        return self.engine.load().healthy

    def has_room(self) -> bool:
        return self.inflight < self.max_inflight

    @property
    def rebuilding(self) -> bool:
        return self._rebuilding is not None and not self._rebuilding.done()

    def schedule_rebuild(self) -> bool:
        """Start a background rebuild of a dead engine (once); False if it cannot be rebuilt."""
        if self.builder is None or self.rebuilding or self.healthy():
            return False
        if time.monotonic() < self._next_rebuild_at:
            return False
        self._rebuilding = asyncio.get_running_loop().create_task(
            self._rebuild(), name=f"rebuild-{self.name}"
        )
        return True

    async def _rebuild(self) -> None:
        assert self.builder is not None
        dead = self.engine
        try:
            await dead.aclose()
        except (EngineError, OSError) as exc:
            log.warning("closing dead replica %s failed: %s", dead.name, exc)
        for attempt in range(1, self.rebuild_attempts + 1):
            fresh = self.builder()
            try:
                await fresh.start()
                if not fresh.load().healthy:
                    raise EngineUnavailable("started but reports unhealthy")
            except (EngineError, OSError, RuntimeError) as exc:
                log.warning("rebuild %d of %s failed: %s", attempt, dead.name, exc)
                await _quietly_close(fresh)
                await asyncio.sleep(self.rebuild_backoff_s * attempt)
                continue
            self.engine = fresh
            self.generation += 1
            self.rebuilds += 1
            log.info("replica %s rebuilt (generation %d)", fresh.name, self.generation)
            return
        self._next_rebuild_at = time.monotonic() + self.give_up_cooldown_s
        log.error("replica %s stays down after %d rebuilds", dead.name, self.rebuild_attempts)

    async def wait_rebuilt(self) -> None:
        if self._rebuilding is not None:
            await asyncio.shield(self._rebuilding)

    async def aclose(self) -> None:
        task, self._rebuilding = self._rebuilding, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.engine.aclose()


async def _quietly_close(engine: Engine) -> None:
    try:
        await engine.aclose()
    except (EngineError, OSError) as exc:
        log.warning("closing a failed build of %s: %s", engine.name, exc)
