"""A tier's pool of engine replicas: score, pick, stream, retry elsewhere, queue when full.

Choosing a replica (after llm-d's scorers): among healthy replicas with room, each gets
``queue·w_q + kv·w_kv + prefix·w_p`` where
  queue  = 1 for the shortest queue, 0 for the longest (local in-flight + engine waiting;
           in-flight is bumped at pick time because engine statistics arrive late),
  kv     = 1 - KV-cache usage,
  prefix = the share of the prompt's blocks this replica is known to hold.
Ties go to the fewest in flight, then round-robin. When every replica is full, a request
waits in a bounded first-come-first-served queue (neither an arrival nor a waiter run
early by its own timer takes a freed slot from a request waiting longer); a full queue
or a timed-out wait is ``EngineOverloaded`` (OpenAI 503 with Retry-After). Overload or
death before the first chunk moves the request to another replica; a dead replica is
rebuilt in the background.

Two priority classes. A ``batch`` request (a batch line) waits in its own queue and takes
a slot only while no interactive request waits and its replica runs fewer than
``batch_share x max_inflight`` batch lines; interactive waiters are always woken first.
An interactive request that has waited ``preempt_after_s`` for a slot (every replica full)
preempts the youngest running batch line: its engine request is cancelled, and it queues
again and runs from the start. The short wait first lets a slot free up on its own (a
replica of n slots running requests of L seconds frees one every L/n on average), which
throws far fewer batch lines away for a few milliseconds of interactive wait. A batch
line's answer is gathered whole before the caller sees any of it (batch callers want the
whole answer anyway), so a preempted try leaves no trace but the engine time it used. A
batch line waits ``wait_timeout_s`` in all, preemptions included, then is
``EngineOverloaded`` (the batch runner waits and asks again).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from backends.affinity import PrefixIndex, block_keys, canonical_prompt
from backends.base import Chunk, GenerationRequest
from backends.errors import EngineOverloaded, EngineUnavailable, UpstreamFailed
from backends.replica import Replica

__all__ = ["EnginePool", "PoolCounters", "PoolSettings", "Replica", "StreamInfo"]

Held = tuple[str, int]  # a replica's name and the prefix blocks it holds


@dataclass(frozen=True, slots=True)
class PoolSettings:
    queue_weight: float = 2.0
    kv_weight: float = 2.0
    prefix_weight: float = 3.0
    max_waiting: int = 256
    wait_timeout_s: float = 30.0
    retry_after_s: int = 1
    prefix_block_chars: int = 256
    prefix_index_blocks: int = 65536
    rebuild_dead: bool = True
    batch_share: float = 0.5  # batch lines on one replica: at most this share of its slots
    # An interactive request that has waited this long preempts a batch line; None: never.
    preempt_after_s: float | None = 0.02


@dataclass(slots=True)
class StreamInfo:
    """Filled in by ``EnginePool.stream``: which replica served, after how many tries."""

    replica: str | None = None
    model: str | None = None
    attempts: int = 0
    prefix_blocks: int = 0
    matched_blocks: int = 0


@dataclass(eq=False, slots=True)
class _Waiter:
    """One queued request; ``wake`` is replaced each time it goes back to sleep."""

    wake: asyncio.Future[None]
    model: str | None  # the replicas it can use: this model's (None: any)...
    exclude: set[Replica]  # ...but these

    def could_use(self, replicas: Iterable[Replica]) -> bool:
        return any(
            r not in self.exclude and (self.model is None or r.engine.model == self.model)
            for r in replicas
        )


class _Preempted(Exception):
    """A running batch line gave its slot to an interactive request; it runs again."""


@dataclass(slots=True)
class PoolCounters:
    picks: int = 0
    retries: int = 0
    queued: int = 0
    rejected: int = 0
    preempted: int = 0  # batch lines cancelled for an interactive request (and run again)
    prefix_requests: int = 0  # picks for prompts with at least one full block
    prefix_hits: int = 0  # ... that went to a replica holding part of the prefix

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_requests if self.prefix_requests else 0.0


class EnginePool:
    def __init__(
        self, tier: str, replicas: Sequence[Replica], settings: PoolSettings | None = None
    ) -> None:
        self.tier = tier
        self.replicas = tuple(replicas)
        self.settings = settings or PoolSettings()
        self.counters = PoolCounters()
        self.index = PrefixIndex(self.settings.prefix_index_blocks)
        self.waiting = 0  # interactive requests in the queue (len of _queue; gauges read it)
        self.batch_waiting = 0  # batch lines in theirs
        self._queue: deque[_Waiter] = deque()
        self._batch_queue: deque[_Waiter] = deque()
        # Batch lines running, oldest first, and those cancelled whose slot is not yet free.
        self._batch_runs: list[tuple[Replica, asyncio.Task[list[Chunk]]]] = []
        self._preempting: set[asyncio.Task[list[Chunk]]] = set()
        self._turn = itertools.count()

    def add(self, replica: Replica) -> None:
        """A node found at run time joins; picks see it from the next request on."""
        if replica not in self.replicas:
            self.replicas = (*self.replicas, replica)
            self._wake()

    def remove(self, replica: Replica) -> None:
        """A node gone from discovery leaves; its streams in flight end on their own."""
        self.replicas = tuple(r for r in self.replicas if r is not replica)
        self.index.forget(replica.key)

    def models(self) -> set[str]:
        return {r.engine.model for r in self.replicas}

    def healthy(self) -> bool:
        return any(r.healthy() for r in self.replicas)

    def _candidates(self, model: str | None, exclude: set[Replica]) -> list[Replica]:
        chosen = []
        for replica in self.replicas:
            if replica in exclude or (model is not None and replica.engine.model != model):
                continue
            if replica.healthy():
                chosen.append(replica)
            elif self.settings.rebuild_dead:
                replica.schedule_rebuild()
        return chosen

    def _pick(
        self, free: list[Replica], keys: Sequence[bytes], held: Held | None = None
    ) -> tuple[Replica, int]:
        """The best-scoring replica and how many prefix blocks it holds; ``held``: a
        replica another gateway replica saw serve this conversation, and how many of its
        blocks that put there (this process's index may not know it)."""
        s = self.settings
        loads = {r: r.engine.load() for r in free}
        queues = {r: r.inflight + loads[r].waiting for r in free}
        low, high = min(queues.values()), max(queues.values())
        turn = next(self._turn)
        best: tuple[float, int, int] | None = None
        chosen, chosen_match = free[0], 0
        for position, replica in enumerate(free):
            queue = 1.0 if high == low else (high - queues[replica]) / (high - low)
            matched = self.index.matched_blocks(keys, replica.key) if keys else 0
            if held is not None and held[0] == replica.name:
                matched = max(matched, min(held[1], len(keys)))
            prefix = matched / len(keys) if keys else 0.0
            score = (
                s.queue_weight * queue
                + s.kv_weight * (1.0 - loads[replica].kv_usage)
                + s.prefix_weight * prefix
            )
            rank = (score, -replica.inflight, -((position - turn) % len(free)))
            if best is None or rank > best:
                best, chosen, chosen_match = rank, replica, matched
        return chosen, chosen_match

    def _room(self, replica: Replica, batch: bool) -> int:
        """Slots ``replica`` has for one more request of this class."""
        room = replica.max_inflight - replica.inflight
        if batch:
            share = math.ceil(self.settings.batch_share * replica.max_inflight)
            room = min(room, share - replica.batch_inflight)
        return max(room, 0)

    async def _acquire(
        self,
        model: str | None,
        exclude: set[Replica],
        keys: Sequence[bytes],
        info: StreamInfo,
        held: Held | None = None,
        batch_deadline: float | None = None,
    ) -> Replica:
        """Pick a healthy replica with room; wait (bounded, first come first served) while
        all are full. A request that arrives while others wait queues behind them, even if
        a slot has just been freed: that slot is theirs. A batch line (``batch_deadline``
        set: when it gives up) also waits while any interactive request waits."""
        s = self.settings
        batch = batch_deadline is not None
        queue = self._batch_queue if batch else self._queue
        loop = asyncio.get_running_loop()
        waiter: _Waiter | None = None
        deadline = batch_deadline or 0.0
        preempt_at: float | None = None  # when an interactive waiter may preempt
        try:
            while True:
                candidates = self._candidates(model, exclude)
                if not candidates:
                    raise EngineUnavailable(f"tier {self.tier!r} has no healthy replica")
                free = [r for r in candidates if self._room(r, batch)]
                if waiter is None:
                    turn = not queue
                else:  # (with no slot free, no need to look down the queue)
                    turn = bool(free) and _first_in_line(queue, waiter, free)
                if free and turn and not (batch and self._queue):
                    chosen, matched = self._pick(free, keys, held)
                    chosen.inflight += 1
                    chosen.batch_inflight += batch
                    self.counters.picks += 1
                    if keys:
                        self.counters.prefix_requests += 1
                        self.counters.prefix_hits += matched > 0
                        self.index.record(keys, chosen.key)
                    info.matched_blocks = matched
                    return chosen
                if waiter is None:
                    if not batch and len(queue) >= s.max_waiting:
                        self.counters.rejected += 1
                        raise EngineOverloaded(
                            f"tier {self.tier!r} is full ({self.waiting} waiting)",
                            s.retry_after_s,
                        )
                    waiter = _Waiter(loop.create_future(), model, exclude)
                    queue.append(waiter)
                    self._count_waiting()
                    self.counters.queued += 1
                    if not batch:
                        deadline = loop.time() + s.wait_timeout_s
                        if s.preempt_after_s is not None:
                            preempt_at = loop.time() + s.preempt_after_s
                else:
                    if free and not turn:  # an older waiter's slot: it may not know (a
                        self._wake()  # replica back from the dead wakes no one)
                    if waiter.wake.done():
                        waiter.wake = loop.create_future()
                until = deadline
                if preempt_at is not None:
                    if loop.time() >= preempt_at:
                        self._preempt(candidates)
                    else:
                        until = min(until, preempt_at)
                try:  # not ``wait_for``: on 3.11 it can swallow a cancellation
                    async with asyncio.timeout_at(until):
                        await waiter.wake
                except TimeoutError:
                    if loop.time() < deadline:
                        continue  # time to preempt
                    self.counters.rejected += 1
                    raise EngineOverloaded(
                        f"tier {self.tier!r} queue wait timed out", s.retry_after_s
                    ) from None
        finally:
            if waiter is not None:
                queue.remove(waiter)
                self._count_waiting()
                # Room left (several slots freed, or this one gave up): the next may go.
                if any(r.has_room() for r in self.replicas):
                    self._wake()

    def _count_waiting(self) -> None:
        self.waiting, self.batch_waiting = len(self._queue), len(self._batch_queue)

    def _preempt(self, candidates: list[Replica]) -> None:
        """Free a slot for a waiting interactive request: cancel the youngest batch line on
        a replica it could use, one per waiting request (counting those cancelled already)."""
        if len(self._preempting) >= len(self._queue):
            return
        for replica, task in reversed(self._batch_runs):
            if replica in candidates and task not in self._preempting and task.cancel():
                self._preempting.add(task)
                self.counters.preempted += 1
                return

    def _wake(self) -> None:
        """Wake every interactive waiter, oldest first: they run, and pick, in that order.
        Only when none waits, wake as many batch lines as there are batch slots."""
        if self._queue:
            waiters: Iterable[_Waiter] = self._queue
        else:
            room = sum(self._room(r, True) for r in self.replicas)
            waiters = itertools.islice(self._batch_queue, room)
        for waiter in waiters:
            if not waiter.wake.done():
                waiter.wake.set_result(None)

    def _release(self, replica: Replica, batch: bool) -> None:
        replica.inflight -= 1
        replica.batch_inflight -= batch
        self._wake()

    async def _run_batch(self, replica: Replica, request: GenerationRequest) -> list[Chunk]:
        """A batch line's whole answer, gathered in a task that ``_preempt`` may cancel:
        then ``_Preempted`` (the caller's own cancellation stays a cancellation)."""
        task = asyncio.create_task(_gather(replica.engine.stream(request)))
        run = (replica, task)
        self._batch_runs.append(run)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task in self._preempting and not (current and current.cancelling()):
                raise _Preempted from None
            raise
        finally:
            task.cancel()
            self._batch_runs.remove(run)
            self._preempting.discard(task)

    async def stream(
        self,
        request: GenerationRequest,
        info: StreamInfo | None = None,
        held: tuple[str, int] | None = None,
    ) -> AsyncIterator[Chunk]:
        """Stream from one replica; before the first chunk, overload or death moves to
        another. ``held``: (replica name, characters of this conversation's prefix) that
        replica is known to hold from a session's last turn (``routers/live_sessions.py``).
        A ``batch`` request yields its chunks only once the engine has given them all."""
        info = info or StreamInfo()
        tried: set[Replica] = set()
        model = request.model if request.model in self.models() else None
        block = self.settings.prefix_block_chars
        keys = block_keys(canonical_prompt(request), block)
        info.prefix_blocks = len(keys)
        blocks = None if held is None else (held[0], held[1] // block)
        batch = request.priority == "batch"
        give_up = asyncio.get_running_loop().time() + self.settings.wait_timeout_s
        whole: list[Chunk] = []
        while True:
            replica = await self._acquire(
                model, tried, keys, info, blocks, give_up if batch else None
            )
            info.replica, info.model = replica.name, replica.engine.model
            info.attempts += 1
            started = False
            try:
                if batch:
                    whole = await self._run_batch(replica, request)
                    break
                async for chunk in replica.engine.stream(request):
                    started = True
                    yield chunk
                return
            except _Preempted:
                continue
            except (EngineOverloaded, EngineUnavailable, UpstreamFailed) as exc:
                died = not replica.healthy()
                if died and self.settings.rebuild_dead:
                    replica.schedule_rebuild()
                movable = isinstance(exc, EngineOverloaded | EngineUnavailable) or died
                tried.add(replica)
                if started or not movable:
                    raise
                if not self._candidates(model, tried):
                    if died and not isinstance(exc, EngineUnavailable):
                        raise EngineUnavailable(f"{replica.name} died: {exc}") from exc
                    raise
                self.counters.retries += 1
            finally:
                self._release(replica, batch)
        for chunk in whole:
            yield chunk


def _first_in_line(queue: deque[_Waiter], waiter: _Waiter, free: list[Replica]) -> bool:
    """No waiter queued before ``waiter`` could take one of ``free``. A freed slot wakes
    every waiter oldest first, but a waiter's own timer (its preempt time) can run it
    ahead of them in the same step: the slot is still theirs."""
    for older in queue:
        if older is waiter:
            return True
        if older.could_use(free):
            return False
    return True


async def _gather(stream: AsyncIterator[Chunk]) -> list[Chunk]:
    return [chunk async for chunk in stream]
