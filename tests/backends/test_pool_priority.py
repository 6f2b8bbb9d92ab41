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
from tests.backends.gated_engine import GatedEngine, hand_over, let_all_go, until

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


def request(tag: str, priority: Priority = "interactive") -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        model="fake",
        sampling=SamplingParams(max_tokens=TOKENS),
        messages=({"role": "user", "content": tag},),
        priority=priority,
    )


async def served(
    pool: EnginePool, tag: str, priority: Priority = "interactive", order: list[str] | None = None
) -> tuple[float, list[Chunk]]:
    """Seconds to the first chunk, and every chunk."""
    started, first, chunks = time.monotonic(), 0.0, []
    async for chunk in pool.stream(request(tag, priority)):
        if not chunks:
            first = time.monotonic() - started
            if order is not None:
                order.append(tag)
        chunks.append(chunk)
    return first, chunks


def gated_pool(slots: int, **settings: object) -> tuple[GatedEngine, EnginePool]:
    """A pool whose engine answers only as the test lets them go."""
    gated = GatedEngine(name="fake-0", model="fake", tokens=TOKENS, max_running=slots)
    pool = EnginePool(
        "small",
        [Replica(gated, max_inflight=slots)],
        PoolSettings(**settings),  # type: ignore[arg-type]
    )
    return gated, pool


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
    """Every slot holds a batch line mid-answer: an interactive arrival starts while both
    are still held, the youngest line is cancelled and runs again, and its answer is the
    unpreempted one."""
    gated, pool = gated_pool(slots=2, batch_share=1.0, preempt_after_s=0.0)
    alone = asyncio.create_task(served(pool, "line-1", "batch"))
    await until(lambda: len(gated.held), 1)
    gated.let_go()
    _, alone_chunks = await alone
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch")) for i in range(2)]
    await until(lambda: pool.replicas[0].batch_inflight, 2)
    order: list[str] = []
    chat = asyncio.create_task(served(pool, "chat", order=order))
    await until(lambda: (order, len(gated.held), pool.batch_waiting), (["chat"], 2, 1))
    assert pool.counters.preempted == 1
    answers = await let_all_go(gated, *lines, chat)
    assert answers[1][1] == alone_chunks  # the preempted line ran again, whole
    assert gated.counters.aborted == 1
    assert_idle(pool)


async def test_an_interactive_request_preempts_only_after_preempt_after_s() -> None:
    """A slot that frees up within ``preempt_after_s`` costs no batch line; with none
    freeing, the waiting request preempts one, and not before ``preempt_after_s``."""
    gated, pool = gated_pool(slots=2, batch_share=1.0, preempt_after_s=60.0)
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch")) for i in range(2)]
    await until(lambda: len(gated.held), 2)
    order: list[str] = []
    chat = asyncio.create_task(served(pool, "chat", order=order))
    await until(lambda: pool.waiting, 1)
    gated.let_go()  # a line ends long before the 60 s are up: its slot is the chat's
    await until(lambda: order, ["chat"])
    assert pool.counters.preempted == 0
    await let_all_go(gated, *lines, chat)
    assert_idle(pool)

    gated, pool = gated_pool(slots=2, batch_share=1.0, preempt_after_s=0.2)
    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch")) for i in range(2)]
    await until(lambda: len(gated.held), 2)
    chat = asyncio.create_task(served(pool, "chat"))
    await until(lambda: pool.counters.preempted, 1)  # no line ends: it preempts one
    (first, _), *_ = await let_all_go(gated, chat, *lines)
    assert first >= 0.2, first
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
    """40 lines on 8 slots at a share of one half: 4 run, and each line that ends hands
    its slot to the next at once (answers end one at a time, each once the last freed
    slot is taken), never a fifth."""
    gated, pool = gated_pool(slots=8, batch_share=0.5)

    lines = [asyncio.create_task(served(pool, f"line-{i}", "batch")) for i in range(40)]
    await hand_over(gated, lambda: pool.batch_waiting, 4, 40)
    await asyncio.gather(*lines)
    assert gated.peak == 4 and gated.counters.finished == 40
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
    """A line that finds the slot held gives up after ``wait_timeout_s``, while the slot
    is still held (it is never served late), and not before."""
    gated, pool = gated_pool(slots=1, wait_timeout_s=0.1, preempt_after_s=None)
    busy = asyncio.create_task(served(pool, "chat"))
    await until(lambda: len(gated.held), 1)
    started = time.monotonic()
    with pytest.raises(EngineOverloaded):
        await served(pool, "line", "batch")
    assert time.monotonic() - started >= 0.1
    assert len(gated.held) == 1  # the chat still holds the slot
    await let_all_go(gated, busy)
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
