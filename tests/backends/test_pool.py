"""Pool behaviour on protocol fakes: spreading, prefix affinity, bounded queue, failover."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

from backends.base import GenerationRequest, SamplingParams
from backends.errors import EngineOverloaded, EngineUnavailable, UpstreamFailed
from backends.fake import FakeEngine
from backends.pool import EnginePool, PoolSettings, Replica, StreamInfo


def replicas(count: int, **options: object) -> list[Replica]:
    built = []
    for i in range(count):

        def builder(i: int = i) -> FakeEngine:
            return FakeEngine(name=f"fake-{i}", model="fake", **options)  # type: ignore[arg-type]

        built.append(Replica(builder(), builder=builder))
    return built


def request(messages: list[dict[str, str]], max_tokens: int = 4) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        model="fake",
        sampling=SamplingParams(max_tokens=max_tokens),
        messages=tuple(messages),
    )


async def run(pool: EnginePool, req: GenerationRequest) -> StreamInfo:
    info = StreamInfo()
    async for _ in pool.stream(req, info):
        pass
    return info


async def test_a_burst_spreads_evenly_by_in_flight_count() -> None:
    pool = EnginePool("small", replicas(3, tokens=6, token_delay_s=0.01))
    burst = [request([{"role": "user", "content": f"q{i}"}]) for i in range(30)]
    infos = await asyncio.gather(*(run(pool, r) for r in burst))
    served = Counter(info.replica for info in infos)
    assert served == {"fake-0": 10, "fake-1": 10, "fake-2": 10}
    assert all(r.inflight == 0 for r in pool.replicas)


def conversation_turns(index: int, turns: int) -> list[list[dict[str, str]]]:
    opening = f"conversation {index}: " + " ".join(f"fact{index}-{k}" for k in range(300))
    history = [{"role": "user", "content": opening}]
    all_turns = []
    for turn in range(turns):
        all_turns.append(list(history))
        history += [
            {"role": "assistant", "content": f"answer {turn} " * 8},
            {"role": "user", "content": f"follow-up {turn} " * 8},
        ]
    return all_turns


async def converse(pool: EnginePool, conversations: int, turns: int) -> dict[int, list[str]]:
    """Conversations run side by side, one turn each per round, as chat users do."""
    plans = {c: conversation_turns(c, turns) for c in range(conversations)}
    placed: dict[int, list[str]] = {c: [] for c in plans}
    for turn in range(turns):
        infos = await asyncio.gather(*(run(pool, request(plans[c][turn])) for c in plans))
        for c, info in zip(plans, infos, strict=True):
            assert info.replica is not None
            placed[c].append(info.replica)
    return placed


async def test_prefix_affinity_keeps_each_conversation_on_one_replica(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pool = EnginePool("small", replicas(4, tokens=4, token_delay_s=0.005))
    placed = await converse(pool, conversations=7, turns=5)
    assert all(len(set(where)) == 1 for where in placed.values()), placed
    assert len({where[0] for where in placed.values()}) == 4  # and conversations still spread
    # Every turn after the first finds its prefix where it was sent: 4 of 5 requests.
    assert pool.counters.prefix_hit_rate == pytest.approx(28 / 35)
    with capsys.disabled():
        print(
            f"\nprefix affinity hit rate: {pool.counters.prefix_hit_rate:.2f}"
            " (7 conversations x 5 turns)"
        )


async def test_without_prefix_weight_conversations_wander() -> None:
    """The control: the same traffic with the prefix scorer off lands all over the pool."""
    settings = PoolSettings(prefix_weight=0.0)
    pool = EnginePool("small", replicas(4, tokens=4, token_delay_s=0.005), settings)
    placed = await converse(pool, conversations=7, turns=5)
    assert any(len(set(where)) > 1 for where in placed.values())


async def test_full_queue_raises_overloaded_with_retry_after() -> None:
    settings = PoolSettings(max_waiting=1, retry_after_s=7, wait_timeout_s=5)
    group = replicas(1, tokens=20, token_delay_s=0.02)
    group[0].max_inflight = 1
    pool = EnginePool("small", group, settings)
    first = asyncio.create_task(run(pool, request([{"role": "user", "content": "a"}], 20)))
    await asyncio.sleep(0.05)
    queued = asyncio.create_task(run(pool, request([{"role": "user", "content": "b"}], 20)))
    await asyncio.sleep(0.05)
    assert pool.waiting == 1
    with pytest.raises(EngineOverloaded) as caught:
        await run(pool, request([{"role": "user", "content": "c"}]))
    assert caught.value.retry_after_s == 7
    # The queued request is served once the slot frees.
    assert (await first).replica == "fake-0"
    assert (await queued).replica == "fake-0"
    assert pool.counters.rejected == 1 and pool.counters.queued >= 1


async def test_overloaded_replica_moves_the_request_to_another() -> None:
    group = replicas(2, tokens=3)
    group[0].engine.max_running = 0  # type: ignore[attr-defined]  # refuses everything
    pool = EnginePool("small", group, PoolSettings(queue_weight=0, kv_weight=0))
    infos = [await run(pool, request([{"role": "user", "content": f"x{i}"}])) for i in range(4)]
    assert {i.replica for i in infos} == {"fake-1"}
    assert any(i.attempts == 2 for i in infos)


async def test_killed_replica_next_request_succeeds_elsewhere_and_it_is_rebuilt() -> None:
    group = replicas(2, tokens=50, token_delay_s=0.01)
    for r in group:
        r.rebuild_backoff_s = 0.01
    pool = EnginePool("small", group)
    info = StreamInfo()
    stream = pool.stream(request([{"role": "user", "content": "long"}]), info)
    await anext(stream)
    victim = next(r for r in group if r.name == info.replica)
    victim.engine.dead = True  # type: ignore[attr-defined]  # dies mid-stream
    with pytest.raises(UpstreamFailed):
        async for _ in stream:
            pass
    after = await run(pool, request([{"role": "user", "content": "next"}]))
    assert after.replica != victim.name and after.attempts == 1
    await asyncio.wait_for(victim.wait_rebuilt(), 5)
    assert victim.rebuilds == 1 and victim.healthy() and victim.generation == 1
    back = [await run(pool, request([{"role": "user", "content": f"n{i}"}])) for i in range(4)]
    assert victim.name in {b.replica for b in back}


async def test_no_healthy_replica_is_unavailable() -> None:
    group = replicas(2, dead=True)
    pool = EnginePool("large", group, PoolSettings(rebuild_dead=False))
    with pytest.raises(EngineUnavailable):
        await run(pool, request([{"role": "user", "content": "x"}]))
