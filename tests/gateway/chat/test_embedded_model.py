"""The embedded default engine for real: SmolLM2-135M on llama.cpp behind a real uvicorn."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import httpx
import openai
import pytest

from tiergate_testing.configs import TEST_KEY, smollm2_config
from tiergate_testing.gateways import running_gateway

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def gateway():  # type: ignore[no-untyped-def]
    with running_gateway(smollm2_config(replicas=2)) as running:
        yield running


@pytest.fixture
def client(gateway) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def test_real_completion_with_usage(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(model="auto", messages=QUESTION, max_tokens=24)
    text = result.choices[0].message.content
    assert text and len(text.split()) >= 2
    assert result.usage is not None
    assert result.usage.prompt_tokens > 10  # the chat template's system turn is counted
    assert 0 < result.usage.completion_tokens <= 24
    assert result.model == "smollm2-135m-instruct"


def test_stream_concatenates_to_non_stream_text(client: openai.OpenAI) -> None:
    params = {"model": "small", "messages": QUESTION, "max_tokens": 24, "temperature": 0, "seed": 3}
    whole = client.chat.completions.create(**params)  # type: ignore[call-overload]
    pieces = [
        event.choices[0].delta.content or ""
        for event in client.chat.completions.create(stream=True, **params)  # type: ignore[call-overload]
        if event.choices
    ]
    assert len([p for p in pieces if p]) > 3
    assert "".join(pieces) == whole.choices[0].message.content


def test_eight_concurrent_streams_interleave_and_the_loop_never_blocks(gateway) -> None:  # type: ignore[no-untyped-def]
    gaps: list[float] = []
    stop = threading.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    assert gateway.loop is not None
    beat = asyncio.run_coroutine_threadsafe(heartbeat(), gateway.loop)
    arrivals: dict[int, list[float]] = {}

    async def one(index: int) -> str:
        client = openai.AsyncOpenAI(
            base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0
        )
        stream = await client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": f"Write a line about {index}."}],
            max_tokens=16,
            temperature=0,
            stream=True,
        )
        text = []
        async for event in stream:
            if event.choices and event.choices[0].delta.content:
                arrivals.setdefault(index, []).append(time.perf_counter())
                text.append(event.choices[0].delta.content)
        await client.close()
        return "".join(text)

    async def all_of_them() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(8)))

    texts = asyncio.run(all_of_them())
    stop.set()
    beat.result(5)
    assert all(texts)
    # Two replicas generate at once: some stream's tokens arrive between another's.
    spans = sorted((min(t), max(t)) for t in arrivals.values())
    overlapping = sum(1 for a, b in itertools.pairwise(spans) if b[0] < a[1])
    assert overlapping >= 1
    # The event loop kept ticking every few ms while the model ran on worker threads.
    assert max(gaps) < 0.25, f"event loop blocked for {max(gaps) * 1000:.0f} ms"


def test_client_disconnect_stops_generation_in_the_engine(gateway) -> None:  # type: ignore[no-untyped-def]
    engines = [r.engine for r in gateway.state.parts.replicas["smollm2"]]
    aborted_before = sum(e.counters.aborted for e in engines)
    tokens_before = sum(e.counters.generated_tokens for e in engines)
    body = {
        "model": "small",
        "stream": True,
        "max_tokens": 1500,
        "temperature": 0.9,
        "messages": [{"role": "user", "content": "Tell me a very long story."}],
    }
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST",
            gateway.base_url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {TEST_KEY}"},
        ) as response,
    ):
        lines = response.iter_lines()
        received = 0
        for line in lines:
            if line.startswith("data: "):
                received += 1
            if received >= 5:
                break
    # The connection is closed; the engine must notice and stop.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if sum(e.counters.aborted for e in engines) > aborted_before:
            break
        time.sleep(0.05)
    assert sum(e.counters.aborted for e in engines) == aborted_before + 1
    assert all(e.load().running == 0 for e in engines)
    generated = sum(e.counters.generated_tokens for e in engines) - tokens_before
    assert generated < 1500
    time.sleep(0.5)
    assert sum(e.counters.generated_tokens for e in engines) - tokens_before == generated
