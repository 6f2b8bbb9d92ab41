"""A fake engine whose answers wait for the test's go, so a pool test orders what happens
by letting answers go one at a time, never by how long they take on a busy host."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from backends.base import Chunk, GenerationRequest
from backends.fake import FakeEngine

T = TypeVar("T")

LIVENESS_S = 30.0  # a wait for what must happen next; only a hang reaches it


class GatedEngine(FakeEngine):
    """A ``FakeEngine`` whose every answer, once its first chunk is out, waits for
    ``let_go`` before the rest (the engine's counters count it running meanwhile)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.held: list[asyncio.Event] = []  # answers started and not let go, oldest first
        self.peak = 0  # the most ever held at once

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        go = asyncio.Event()
        self.held.append(go)
        self.peak = max(self.peak, len(self.held))
        try:
            async with aclosing(super().stream(request)) as answer:  # a cancel aborts it
                async for chunk in answer:
                    yield chunk
                    await go.wait()
        finally:
            if go in self.held:  # cancelled while held
                self.held.remove(go)

    def let_go(self) -> None:
        """The oldest held answer runs to its end (and its slot frees)."""
        self.held.pop(0).set()


async def until(probe: Callable[[], object], expected: object) -> None:
    """Yield to the loop until ``probe()`` is ``expected``: a liveness bound, not a verdict
    on time. (It polls: what it reads spans the pool and the engine.)"""
    try:
        async with asyncio.timeout(LIVENESS_S):
            while probe() != expected:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"never {expected!r}: {probe()!r}") from None


async def hand_over(
    gated: GatedEngine, waiting: Callable[[], int], running: int, count: int
) -> None:
    """``count`` requests on ``running`` busy slots: answers end one at a time, each only
    once the slot the last one freed is taken again (``running`` stay busy while any
    waits), then the rest end."""

    def running_and_waiting() -> tuple[int, int]:
        return len(gated.held), waiting()

    await until(running_and_waiting, (running, count - running))
    for left in range(count - running - 1, -1, -1):
        gated.let_go()
        await until(running_and_waiting, (running, left))
    while gated.held:
        gated.let_go()


async def let_all_go(gated: GatedEngine, *tasks: asyncio.Task[T]) -> list[T]:
    """Let every answer go, those that start meanwhile too, until ``tasks`` are done."""
    async with asyncio.timeout(LIVENESS_S):
        while not all(task.done() for task in tasks):
            if gated.held:
                gated.let_go()
            await asyncio.sleep(0.001)
    return list(await asyncio.gather(*tasks))
