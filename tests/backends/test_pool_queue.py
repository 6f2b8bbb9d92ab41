"""The pool's bounded queue is first come, first served, and loses no wake-up: a freed
slot goes to the longest-waiting request, never to one that arrived after it, and
never sits idle while requests wait (what engine nodes behind several fronts need)."""

from __future__ import annotations

import asyncio
import time
import uuid

from backends.base import GenerationRequest, SamplingParams
from backends.fake import FakeEngine
from backends.pool import EnginePool, PoolSettings, Replica
from tests.backends.gated_engine import GatedEngine, hand_over, let_all_go, until


def pool_of(slots: int, token_delay_s: float) -> EnginePool:
    engine = FakeEngine(name="fake-0", model="fake", tokens=4, token_delay_s=token_delay_s)
    return EnginePool("small", [Replica(engine, max_inflight=slots)])


def request(tag: str) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        model="fake",
        sampling=SamplingParams(max_tokens=4),
        messages=({"role": "user", "content": tag},),
    )


async def served(pool: EnginePool, tag: str, order: list[str]) -> None:
    async for chunk in pool.stream(request(tag)):
        if chunk.text and tag not in order:
            order.append(tag)


async def test_waiting_requests_are_served_in_arrival_order() -> None:
    pool = pool_of(slots=1, token_delay_s=0.01)
    order: list[str] = []
    tasks = []
    for i in range(8):
        tasks.append(asyncio.create_task(served(pool, f"r{i}", order)))
        await asyncio.sleep(0.002)  # arrive one after another while the slot is busy
    await asyncio.gather(*tasks)
    assert order == [f"r{i}" for i in range(8)]


async def test_a_late_arrival_does_not_jump_the_queue() -> None:
    """Closed loop: each client sends again the moment its answer ends. With barging,
    the client that just finished retakes the slot it freed and the others starve."""
    pool = pool_of(slots=2, token_delay_s=0.005)
    done: dict[int, int] = {client: 0 for client in range(6)}
    stop = time.monotonic() + 1.0

    async def client(number: int) -> None:
        while time.monotonic() < stop:
            await served(pool, f"c{number}-{done[number]}", [])
            done[number] += 1

    await asyncio.gather(*(client(n) for n in range(6)))
    assert min(done.values()) >= max(done.values()) // 2, done


async def test_no_slot_sits_idle_while_requests_wait() -> None:
    """Answers end one at a time, each only once the slot the last one freed is taken: a
    freed slot goes to a waiting request with nothing else freeing one (no lost wake-up)."""
    engine = GatedEngine(name="fake-0", model="fake", tokens=4)
    pool = EnginePool("small", [Replica(engine, max_inflight=3)])

    requests = [asyncio.create_task(served(pool, f"r{i}", [])) for i in range(12)]
    await hand_over(engine, lambda: pool.waiting, 3, 12)
    await asyncio.gather(*requests)
    assert engine.peak == 3 and engine.counters.finished == 12


async def test_a_younger_waiter_woken_by_its_own_timer_as_a_slot_frees_waits_its_turn() -> None:
    """On a stalled host a younger waiter's preempt timer can run it in the same loop step
    as the freed slot wakes the older one, and ahead of it: the slot is still the older's."""
    engine = GatedEngine(name="fake-0", model="fake", tokens=4)
    pool = EnginePool(
        "small", [Replica(engine, max_inflight=1)], PoolSettings(preempt_after_s=0.05)
    )
    order: list[str] = []
    first = asyncio.create_task(served(pool, "r0", order))
    await until(lambda: order, ["r0"])
    older = asyncio.create_task(served(pool, "r1", order))
    await until(lambda: pool.waiting, 1)
    await asyncio.sleep(0.06)  # the older waiter's preempt timer has run it (nothing to preempt)
    younger = asyncio.create_task(served(pool, "r2", order))
    await until(lambda: pool.waiting, 2)
    time.sleep(0.06)  # noqa: ASYNC251 - the host stalls: the younger one's timer is due...
    await asyncio.sleep(0)  # ...and runs it in the next step, the one that frees r0's slot
    engine.let_go()
    await let_all_go(engine, first, older, younger)
    assert order == ["r0", "r1", "r2"]
    assert pool.waiting == 0
