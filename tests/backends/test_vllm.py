"""vLLM-specific checks beyond the contract: two engines in one process, their own stats."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from backends.base import Chunk, Priority
from tests.backends.conftest import LoopThread
from tests.backends.test_contract import chat, collect, long_prefix

pytestmark = pytest.mark.slow


def test_two_engines_serve_at_once_with_their_own_statistics(
    vllm_engines: list[Any], engine_loop: LoopThread
) -> None:
    first, second = vllm_engines
    before = [e.stats.snapshot().prefix_queries for e in vllm_engines]

    async def both() -> list[list[Chunk]]:
        return await asyncio.gather(
            collect(first, chat("one", max_tokens=16, temperature=0.0)),
            collect(second, chat("two", max_tokens=16, temperature=0.0)),
        )

    results = engine_loop.run(both())
    for chunks in results:
        assert "".join(c.text for c in chunks)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16
    # Now only the first engine works: only its stat logger moves.
    middle = [e.stats.snapshot().prefix_queries for e in vllm_engines]
    assert all(m > b for m, b in zip(middle, before, strict=True))
    system = long_prefix()
    engine_loop.run(collect(first, chat("a", system=system, max_tokens=4)))
    engine_loop.run(collect(first, chat("b", system=system, max_tokens=4)))
    after = [e.stats.snapshot() for e in vllm_engines]
    assert after[0].prefix_queries > middle[0] and after[0].prefix_hits > 0
    assert after[1].prefix_queries == middle[1]
    assert after[0].ttft_s > 0 and after[0].itl_s > 0
    assert all(e.unfinished() == 0 and e.load().healthy for e in vllm_engines)


def test_bad_request_is_rejected_and_leaves_nothing_behind(
    vllm_engines: list[Any], engine_loop: LoopThread
) -> None:
    from backends.errors import UpstreamRejected

    engine = vllm_engines[1]
    too_long = chat(long_prefix(3000), max_tokens=8)  # beyond max_model_len=1024
    with pytest.raises(UpstreamRejected):
        engine_loop.run(collect(engine, too_long))
    assert engine.unfinished() == 0 and engine.counters.active == 0


def test_a_pool_of_two_engines_keeps_a_conversation_where_its_cache_is(
    vllm_engines: list[Any], engine_loop: LoopThread
) -> None:
    from backends.base import GenerationRequest, SamplingParams
    from backends.pool import EnginePool, Replica, StreamInfo

    pool = EnginePool("small", [Replica(e) for e in vllm_engines])
    history: list[dict[str, str]] = [{"role": "user", "content": long_prefix()}]

    async def turn() -> tuple[str | None, int]:
        request = GenerationRequest(
            request_id="conv",
            model="tiny-llama",
            sampling=SamplingParams(max_tokens=8, temperature=0.0),
            messages=tuple(history),
        )
        info = StreamInfo()
        text, cached = "", 0
        async for chunk in pool.stream(request, info):
            text += chunk.text
            if chunk.usage is not None:
                cached = chunk.usage.cached_tokens
        history.extend(
            [{"role": "assistant", "content": text}, {"role": "user", "content": "go on"}]
        )
        return info.replica, cached

    turns = [engine_loop.run(turn()) for _ in range(3)]
    assert len({replica for replica, _ in turns}) == 1
    assert turns[0][1] == 0 and all(cached >= 128 for _, cached in turns[1:])
    assert pool.counters.prefix_hit_rate == 2 / 3


def test_gateway_over_in_process_vllm(vllm_gateway: Any) -> None:
    """The whole path: official client → uvicorn → pool → AsyncLLM in the gateway process."""
    import httpx
    import openai

    from tiergate_testing.configs import TEST_KEY

    gw = vllm_gateway
    system = long_prefix()
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]
    with openai.OpenAI(base_url=gw.base_url + "/v1", api_key=TEST_KEY, max_retries=0) as client:
        engine = gw.state.parts.replicas["tiny"][0].engine
        params: dict[str, Any] = {"model": "small", "max_tokens": 12, "temperature": 0}
        whole = client.chat.completions.with_raw_response.create(messages=messages, **params)
        first = whole.parse()
        assert first.usage is not None and first.usage.completion_tokens == 12
        # Past the gateway's own exact cache, so the engine's prefix cache is what answers.
        streamed = client.chat.completions.create(
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"Cache-Control": "no-cache"},
            **params,
        )
        pieces, usage = [], None
        for event in streamed:
            if event.choices and event.choices[0].delta.content:
                pieces.append(event.choices[0].delta.content)
            usage = event.usage or usage
        assert "".join(pieces) == first.choices[0].message.content
        assert usage is not None and usage.prompt_tokens_details is not None
        assert usage.prompt_tokens_details.cached_tokens >= 128  # same prompt, cache hit
        # A client that goes away mid-stream leaves nothing running in the engine.
        body = {**params, "max_tokens": 500, "stream": True, "messages": messages}
        with (
            httpx.Client(timeout=30) as http,
            http.stream(
                "POST",
                gw.base_url + "/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {TEST_KEY}"},
            ) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data: ") and '"content"' in line:
                    break
        deadline = time.monotonic() + 10
        while (engine.unfinished() or not engine.counters.aborted) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.unfinished() == 0 and engine.counters.aborted >= 1


def test_a_batch_line_waits_behind_an_interactive_request_in_vllms_scheduler(
    vllm_engines: list[Any], engine_loop: LoopThread
) -> None:
    """Every sequence slot busy with batch lines, two more batch lines waiting: the
    interactive request that arrives last takes the first slot that frees (vLLM's priority
    policy), where first come, first served gives it to the batch line that waited longest.

    Ordered by vLLM's own scheduler counts, not by time: the slot is freed (a running line
    aborted) only once the scheduler reports all three requests waiting, so the verdict does
    not depend on how fast a loaded host runs the engine (it did: a short line that ended
    before the interactive request was queued let ``late0`` start first)."""
    from dataclasses import replace

    engine = vllm_engines[1]  # scheduling_policy: priority
    slots = engine.args["max_num_seqs"]
    order: list[str] = []
    running = asyncio.Event()  # every slot has started a line
    freed_slot_taken = asyncio.Event()  # the interactive request or late0 started

    async def run(tag: str, tokens: int, priority: Priority) -> None:
        request = replace(chat(tag, max_tokens=tokens, temperature=0.0), priority=priority)
        async for _ in engine.stream(request):
            if tag not in order:
                order.append(tag)
                if len(order) == slots:
                    running.set()
                if tag in ("interactive", "late0"):
                    freed_slot_taken.set()

    async def scheduler_waiting(count: int) -> None:
        """Until vLLM's scheduler reports ``count`` requests waiting (its stats, each step)."""
        async with asyncio.timeout(300):  # a guard against a hang, not a verdict
            while engine.load().waiting < count:  # noqa: ASYNC110 (stats, not an event)
                await asyncio.sleep(0.01)

    async def scenario() -> None:
        # Long lines (greedy: the same tokens every run, no early end) hold every slot.
        holders = [asyncio.create_task(run(f"long{i}", 600, "batch")) for i in range(slots)]
        await running.wait()
        queued = [asyncio.create_task(run(f"late{i}", 8, "batch")) for i in range(2)]
        await scheduler_waiting(2)  # both batch lines queued before the interactive request
        queued.append(asyncio.create_task(run("interactive", 8, "interactive")))
        await scheduler_waiting(3)
        assert not any(h.done() for h in holders), "a slot freed before all three waited"
        assert not {"late0", "late1", "interactive"} & set(order)
        holders[0].cancel()  # one slot frees: vLLM aborts the line
        await freed_slot_taken.wait()  # the verdict: who took it
        for holder in holders[1:]:  # the rest need not run their 600 tokens
            holder.cancel()
        await asyncio.gather(*queued)
        await asyncio.gather(*holders, return_exceptions=True)

    engine_loop.run(scenario(), timeout=900)
    assert order.index("interactive") < order.index("late0"), order
    deadline = time.monotonic() + 10
    while engine.unfinished() and time.monotonic() < deadline:
        time.sleep(0.05)  # the aborts reach the engine core
    assert engine.unfinished() == 0
