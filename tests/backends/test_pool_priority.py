"""The pool's priority class on protocol fakes: an interactive request never waits behind a
batch line (queued or running), batch lines stay under their share and use the slots
interactive traffic leaves, a preempted line runs again whole, and nothing leaks."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from backends.base import Chunk, GenerationRequest, Priority, SamplingParams
from backends.errors import EngineOverloaded
from backends.fake import FakeEngine
from backends.pool import EnginePool, PoolSettings, Replica

TOKENS = 8


def pool_of(slots: int, token_delay_s: float, **settings: object) -> EnginePool:
    engine = FakeEngine(
        name="fake-0", model="fake", tokens=TOKENS, token_delay_s=token_delay_s, max_running=slots
    )
    return EnginePool(
        "small",
        [Replica(engine, max_inflight=slots)],
        PoolSettings(**settings),  # type: ignore[arg-type]
    )


def request(tag: str) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        model="fake",
        sampling=SamplingParams(max_tokens=TOKENS),
        messages=({"role": "user", "content": tag},),
    )


async def served(
    pool: EnginePool, tag: str, priority: Priority = "interactive", order: list[str] | None = None
) -> tuple[float, list[Chunk]]:
    """Seconds to the first chunk, and every chunk."""
    started, first, chunks = time.monotonic(), 0.0, []
    async for chunk in pool.stream(request(tag), priority=priority):
        if not chunks:
            first = time.monotonic() - started
            if order is not None:
                order.append(tag)
        chunks.append(chunk)
    return first, chunks


def engine(pool: EnginePool) -> FakeEngine:
    fake = pool.replicas[0].engine
    assert isinstance(fake, FakeEngine)
    return fake


def assert_idle(pool: EnginePool) -> None:
    replica = pool.replicas[0]
    assert (replica.inflight, replica.batch_inflight) == (0, 0)
    assert (pool.waiting, pool.batch_waiting) == (0, 0)
    assert engine(pool).counters.active == 0


async def test_an_interactive_request_preempts_a_running_batch_line() -> None:
    """Every slot holds a long batch line: an interactive arrival starts at once, the
    youngest line is cancelled and runs again, and its answer is the unpreempted one."""
    pool = pool_of(slots=2, token_delay_s=0.05, batch_share=1.0, preempt_after_s=0.0)
    alone = await served(pool, "line-1", "batch")
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch")) for i in range(2)]
    await asyncio.sleep(0.05)
    assert pool.replicas[0].batch_inflight == 2
    first, _ = await served(pool, "chat")
    assert first < 0.2, first  # its own first token (50 ms), not after a line's 400 ms
    assert pool.counters.preempted == 1
    answers = await asyncio.gather(*lines)
    assert answers[1][1] == alone[1]  # the preempted line ran again, whole
    assert engine(pool).counters.aborted == 1
    assert_idle(pool)


async def test_an_interactive_request_preempts_only_after_preempt_after_s() -> None:
    """A slot that frees up on its own within ``preempt_after_s`` costs no batch line."""
    pool = pool_of(slots=2, token_delay_s=0.05, batch_share=1.0, preempt_after_s=0.2)
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch")) for i in range(2)]
    await asyncio.sleep(0.3)  # the lines end at 400 ms: within 200 ms of the next arrival
    first, _ = await served(pool, "chat")
    assert 0.1 < first < 0.2 + 0.05, first
    assert pool.counters.preempted == 0
    await asyncio.gather(*lines)
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch")) for i in range(2)]
    await asyncio.sleep(0.01)  # now they end 390 ms later: it preempts at 200 ms
    first, _ = await served(pool, "chat")
    assert 0.2 < first < 0.39 + 0.05, first
    assert pool.counters.preempted == 1
    await asyncio.gather(*lines)
    assert_idle(pool)


async def test_without_preemption_a_running_batch_line_finishes_first() -> None:
    pool = pool_of(slots=1, token_delay_s=0.02, batch_share=1.0, preempt_after_s=None)
    line = asyncio.create_task(served(pool, "line", "batch"))
    await asyncio.sleep(0.03)
    first, _ = await served(pool, "chat")
    assert first > 0.1, first  # it waited for the line's 160 ms
    await line
    assert pool.counters.preempted == 0
    assert_idle(pool)


async def test_a_waiting_interactive_request_goes_before_earlier_batch_lines() -> None:
    pool = pool_of(slots=1, token_delay_s=0.01, preempt_after_s=None, batch_share=1.0)
    order: list[str] = []
    busy = asyncio.create_task(served(pool, "chat-0", order=order))
    await asyncio.sleep(0.005)
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch", order)) for i in range(3)]
    await asyncio.sleep(0.005)
    chats = [asyncio.create_task(served(pool, f"chat-{i}", order=order)) for i in (1, 2)]
    await asyncio.gather(busy, *lines, *chats)
    assert order[:3] == ["chat-0", "chat-1", "chat-2"], order
    assert sorted(order[3:]) == ["line-0", "line-1", "line-2"]
    assert_idle(pool)


async def test_batch_lines_stay_under_their_share_and_use_what_is_idle() -> None:
    pool = pool_of(slots=8, token_delay_s=0.005, batch_share=0.5)  # 4 batch slots
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, engine(pool).counters.active)
            await asyncio.sleep(0.002)

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    await asyncio.gather(*(served(pool, f"line-{i}", "batch") for i in range(40)))
    elapsed = time.monotonic() - started
    watcher.cancel()
    assert peak == 4
    # 40 lines of 40 ms, 4 at a time: 10 rounds, with no slot left idle for long.
    assert elapsed < 10 * 0.04 * 2.5, elapsed
    assert_idle(pool)


async def test_batch_lines_wait_out_an_interactive_burst_then_resume() -> None:
    pool = pool_of(slots=4, token_delay_s=0.01, batch_share=1.0)
    order: list[str] = []
    burst = [asyncio.create_task(served(pool, f"chat-{i}", order=order)) for i in range(12)]
    await asyncio.sleep(0)
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch", order)) for i in range(4)]
    await asyncio.gather(*burst, *lines)
    assert all(tag.startswith("chat") for tag in order[:12]), order
    assert pool.counters.preempted == 0  # the lines never got a slot to lose
    assert_idle(pool)


async def test_cancelled_batch_lines_leave_nothing_behind() -> None:
    pool = pool_of(slots=1, token_delay_s=0.01, batch_share=1.0)
    running = asyncio.create_task(served(pool, "running", "batch"))
    waiting = asyncio.create_task(served(pool, "waiting", "batch"))
    await asyncio.sleep(0.02)
    assert (pool.replicas[0].batch_inflight, pool.batch_waiting) == (1, 1)
    waiting.cancel()
    running.cancel()
    await asyncio.gather(running, waiting, return_exceptions=True)
    assert pool.counters.preempted == 0
    assert_idle(pool)
    await served(pool, "after", "batch")  # the pool still serves
    assert_idle(pool)


async def test_a_batch_line_waits_at_most_wait_timeout_in_all() -> None:
    pool = pool_of(slots=1, token_delay_s=0.05, wait_timeout_s=0.1, preempt_after_s=None)
    busy = asyncio.create_task(served(pool, "chat"))  # 400 ms
    await asyncio.sleep(0.01)
    started = time.monotonic()
    with pytest.raises(EngineOverloaded):
        await served(pool, "line", "batch")
    assert time.monotonic() - started < 0.35  # not served after the 400 ms request
    await busy
    assert_idle(pool)


async def test_a_request_cancelled_as_it_is_woken_is_cancelled() -> None:
    """Python 3.11's ``wait_for`` returns instead of raising when the wait ends and the
    task is cancelled in the same step: the request then went on to take a slot (and a
    cancelled batch worker kept running lines)."""
    pool = pool_of(slots=1, token_delay_s=0.01)
    busy = asyncio.create_task(served(pool, "busy"))
    await asyncio.sleep(0.005)
    waiting = asyncio.create_task(served(pool, "waiting"))
    await asyncio.sleep(0.005)
    assert pool.waiting == 1
    pool._wake()  # what a freed slot does, in the step the waiter is cancelled
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await busy
    assert engine(pool).counters.started == 1
    assert_idle(pool)
