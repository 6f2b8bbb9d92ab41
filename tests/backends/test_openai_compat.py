"""The OpenAI-compatible passthrough engine against a real upstream on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from backends.base import Chunk, GenerationRequest, SamplingParams
from backends.errors import (
    EngineOverloaded,
    EngineUnavailable,
    UpstreamFailed,
    UpstreamRejected,
    UpstreamTimeout,
)
from backends.openai_compat import OpenAICompatEngine
from tiergate_testing.net import free_port
from tiergate_testing.upstream import Profile, Upstream

PROFILES = {
    "fast": Profile(chunks=5),
    "slow-stream": Profile(chunks=50, gap_s=0.05),
    "late": Profile(delay_s=2.0),
    "bad": Profile(fail_status=400),
    "busy": Profile(fail_status=429),
    "broken": Profile(fail_status=500),
    "gone": Profile(fail_status=503),
    "cut": Profile(chunks=10, fail_after_chunks=3),
    "stalled": Profile(chunks=10, stall_after_chunks=2),
}


def chat(model: str, *, whole: bool = False, max_tokens: int | None = None) -> GenerationRequest:
    return GenerationRequest(
        request_id="r-1",
        model=model,
        sampling=SamplingParams(max_tokens=max_tokens, temperature=0.5, stop=("END",)),
        messages=({"role": "user", "content": "hello there"},),
        whole=whole,
    )


async def drain(stream: AsyncIterator[Chunk]) -> list[Chunk]:
    return [chunk async for chunk in stream]


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with Upstream(PROFILES) as up:
        up.stats.keep_bodies = True
        yield up


async def engine_for(upstream: Upstream, model: str, **options: object) -> OpenAICompatEngine:
    engine = OpenAICompatEngine(
        name=f"{model}-0", model=model, api_base=upstream.base_url, api_key="sk-up", **options
    )
    await engine.start()
    return engine


async def test_stream_yields_text_then_usage_as_the_upstream_reported(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "fast")
    try:
        chunks = await drain(engine.stream(chat("fast", max_tokens=9)))
    finally:
        await engine.aclose()
    assert "".join(c.text for c in chunks) == "tok " * 5
    final = chunks[-1]
    assert final.finish_reason == "stop"
    assert final.usage is not None and final.usage.completion_tokens == 5
    sent = upstream.stats.bodies[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["max_tokens"] == 9 and sent["temperature"] == 0.5 and sent["stop"] == ["END"]
    assert engine.counters.finished == 1 and engine.counters.active == 0


async def test_whole_request_is_one_unstreamed_call(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "fast")
    try:
        chunks = await drain(engine.stream(chat("fast", whole=True)))
    finally:
        await engine.aclose()
    assert len(chunks) == 1
    assert chunks[0].text == "tok " * 5 and chunks[0].finish_reason == "stop"
    assert chunks[0].usage is not None and chunks[0].usage.completion_tokens == 5
    assert "stream" not in upstream.stats.bodies[0]


async def test_text_completion_goes_to_the_completions_endpoint(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "fast")
    request = GenerationRequest(
        request_id="r-2", model="fast", sampling=SamplingParams(), prompt="once upon"
    )
    try:
        streamed = await drain(engine.stream(request))
        whole = await drain(engine.stream(GenerationRequest(**{**_fields(request), "whole": True})))
    finally:
        await engine.aclose()
    assert "".join(c.text for c in streamed) == whole[0].text == "tok " * 5
    assert upstream.stats.bodies[0]["prompt"] == "once upon"


def _fields(request: GenerationRequest) -> dict[str, object]:
    return {name: getattr(request, name) for name in request.__slots__}


async def test_connections_are_pooled(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "fast")
    try:
        for whole in (False, True) * 5:
            await drain(engine.stream(chat("fast", whole=whole)))
    finally:
        await engine.aclose()
    assert upstream.stats.requests == 10
    assert upstream.stats.connections == 1


@pytest.mark.parametrize(
    ("model", "error"),
    [
        ("bad", UpstreamRejected),
        ("busy", EngineOverloaded),
        ("broken", UpstreamFailed),
        ("gone", EngineUnavailable),
        ("missing", UpstreamRejected),
    ],
)
@pytest.mark.parametrize("whole", [False, True])
async def test_error_statuses_map_once(
    upstream: Upstream, model: str, error: type[Exception], whole: bool
) -> None:
    engine = await engine_for(upstream, model)
    try:
        with pytest.raises(error, match="upstream answered"):
            await drain(engine.stream(chat(model, whole=whole)))
    finally:
        await engine.aclose()
    assert engine.counters.aborted == 1 and engine.counters.active == 0


async def test_rejection_keeps_the_status(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "missing")
    try:
        with pytest.raises(UpstreamRejected) as caught:
            await drain(engine.stream(chat("missing")))
    finally:
        await engine.aclose()
    assert caught.value.status == 404


async def test_refused_connection_is_unavailable() -> None:
    engine = OpenAICompatEngine(
        name="x-0", model="x", api_base=f"http://127.0.0.1:{free_port()}/v1"
    )
    await engine.start()
    try:
        with pytest.raises(EngineUnavailable):
            await drain(engine.stream(chat("x")))
    finally:
        await engine.aclose()


async def test_slow_upstream_times_out(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "late", timeout_s=0.2)
    try:
        with pytest.raises(UpstreamTimeout):
            await drain(engine.stream(chat("late", whole=True)))
    finally:
        await engine.aclose()


async def test_stream_cut_midway_is_a_failure_not_a_short_answer(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "cut")
    seen: list[Chunk] = []
    try:
        with pytest.raises(UpstreamFailed):
            async for chunk in engine.stream(chat("cut")):
                seen.append(chunk)
    finally:
        await engine.aclose()
    assert len(seen) == 3 and all(c.usage is None for c in seen)


async def test_stream_stalled_midway_times_out(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "stalled", timeout_s=0.3)
    seen: list[Chunk] = []
    try:
        with pytest.raises(UpstreamTimeout):
            async for chunk in engine.stream(chat("stalled")):
                seen.append(chunk)
    finally:
        await engine.aclose()
    assert len(seen) == 2 and all(c.usage is None for c in seen)
    assert engine.counters.aborted == 1


async def test_cancel_closes_the_upstream_stream(upstream: Upstream) -> None:
    engine = await engine_for(upstream, "slow-stream")
    try:
        stream = engine.stream(chat("slow-stream"))
        assert (await anext(stream)).text
        assert (await anext(stream)).text
        await stream.aclose()  # type: ignore[attr-defined]
        for _ in range(100):
            if upstream.stats.streams_cut_by_client:
                break
            await asyncio.sleep(0.01)
    finally:
        await engine.aclose()
    assert upstream.stats.streams_cut_by_client == 1
    assert upstream.stats.streams_completed == 0
    assert engine.counters.aborted == 1


async def test_not_started_is_unavailable() -> None:
    engine = OpenAICompatEngine(name="x-0", model="x", api_base="http://127.0.0.1:1/v1")
    with pytest.raises(EngineUnavailable):
        await drain(engine.stream(chat("x")))
