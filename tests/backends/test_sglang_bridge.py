"""The SGLang bridge with a real worker process around a fake engine emitting SGLang's shapes."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from backends.errors import EngineUnavailable, UpstreamRejected
from backends.pool import EnginePool, Replica, StreamInfo
from backends.sglang import SglangEngine
from tests.backends.conftest import LoopThread, sglang_bridge_options
from tests.backends.fake_sglang import expected_text
from tests.backends.test_contract import chat, collect

pytestmark = pytest.mark.slow


def test_incremental_mode_delivers_the_same_text(engine_loop: LoopThread) -> None:
    """SGLang sends cumulative text by default and increments when asked; same result."""
    engine = SglangEngine(
        name="sglang-inc", model="fake", **sglang_bridge_options(incremental_streaming_output=True)
    )
    engine_loop.run(engine.start())
    try:
        request = chat("hello", max_tokens=9)
        chunks = engine_loop.run(collect(engine, request))
        messages = [dict(m) for m in request.messages or ()]
        assert [c.text for c in chunks if c.text] == [
            piece for piece in _pieces(expected_text(messages, 9))
        ]
        assert chunks[-1].finish_reason == "length"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9
    finally:
        engine_loop.run(engine.aclose())
    assert engine.exit_code == 0  # a clean shutdown, not a kill


def _pieces(text: str) -> list[str]:
    return [" " + p for p in text.split(" ") if p]


def test_load_snapshots_reach_the_pool(sglang_bridge: Any, engine_loop: LoopThread) -> None:
    async def during() -> tuple[int, float]:
        stream = sglang_bridge.stream(chat("slow", max_tokens=200))
        await anext(stream)
        await asyncio.sleep(0.3)  # a few load reports (every 50 ms)
        load = sglang_bridge.load()
        await stream.aclose()
        return load.running, load.kv_usage

    running, kv_usage = engine_loop.run(during())
    assert running >= 1 and kv_usage > 0


def test_tools_are_refused_before_reaching_the_worker(
    sglang_bridge: Any, engine_loop: LoopThread
) -> None:
    request = chat("x")
    object.__setattr__(request, "tools", ({"type": "function"},))
    with pytest.raises(UpstreamRejected):
        engine_loop.run(collect(sglang_bridge, request))
    assert sglang_bridge.unfinished() == 0


def test_worker_death_is_reported_and_the_pool_moves_on(engine_loop: LoopThread) -> None:
    def builder(i: int) -> SglangEngine:
        return SglangEngine(
            name=f"sglang-{i}", model="fake", **sglang_bridge_options(fake_token_delay_s=0.01)
        )

    replicas = [Replica(builder(i), builder=lambda i=i: builder(i)) for i in range(2)]
    for r in replicas:
        r.rebuild_backoff_s = 0.1
    pool = EnginePool("small", replicas)

    async def scenario() -> tuple[str, str, StreamInfo]:
        await asyncio.gather(*(r.engine.start() for r in replicas))
        info = StreamInfo()
        stream = pool.stream(chat("long answer", max_tokens=300), info)
        await anext(stream)
        victim = next(r for r in replicas if r.name == info.replica)
        assert isinstance(victim.engine, SglangEngine) and victim.engine.process is not None
        os.kill(victim.engine.process.pid, signal.SIGKILL)  # the worker dies mid-stream
        with pytest.raises(EngineUnavailable):
            async for _ in stream:
                pass
        after = StreamInfo()
        async for _ in pool.stream(chat("next"), after):
            pass
        await asyncio.wait_for(victim.wait_rebuilt(), 60)
        return victim.name, str(after.replica), after

    started = time.monotonic()
    try:
        victim, served_by, after = engine_loop.run(scenario(), timeout=120)
        assert served_by != victim and after.attempts == 1
        rebuilt = next(r for r in replicas if r.name == victim)
        assert rebuilt.rebuilds == 1 and rebuilt.healthy()
        assert time.monotonic() - started < 60
    finally:

        async def close() -> None:
            await asyncio.gather(*(r.aclose() for r in replicas))

        engine_loop.run(close())


def test_a_template_error_is_reported_at_once_and_frees_the_slot(
    sglang_bridge: Any, engine_loop: LoopThread
) -> None:
    """The worker reports every exception (here the chat template's): the request fails in
    well under request_timeout_s and nothing stays held."""
    request = chat("x")
    object.__setattr__(request, "messages", ({"role": "narrator", "content": "x"},))
    started = time.monotonic()
    with pytest.raises(UpstreamRejected, match="unknown role"):
        engine_loop.run(collect(sglang_bridge, request), timeout=10)
    assert time.monotonic() - started < 5
    assert sglang_bridge.unfinished() == 0
    assert "".join(c.text for c in engine_loop.run(collect(sglang_bridge, chat("ok"))))
