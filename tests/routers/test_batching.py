"""The micro-batcher: concurrent callers share model calls, the loop stays free."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from routers.batching import BatcherClosed, EmbeddingFailed, MicroBatcher


class SlowModel:
    """Stands in for the model: sleeps per batch (holding no lock the loop needs)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.batch_sizes: list[int] = []
        self.threads: set[str] = set()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.add(threading.current_thread().name)
        self.batch_sizes.append(len(texts))
        time.sleep(self.seconds)
        if "boom" in texts:
            raise ValueError("model failure")
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)


async def test_concurrent_callers_are_batched_and_get_their_own_rows() -> None:
    model = SlowModel(0.05)
    batcher = MicroBatcher(model, max_batch=8, max_wait_ms=20)
    try:
        texts = ["x" * i for i in range(1, 21)]
        results = await asyncio.gather(*(batcher.submit([t]) for t in texts))
    finally:
        batcher.close()
    assert [float(r[0, 0]) for r in results] == [float(len(t)) for t in texts]
    assert sum(model.batch_sizes) == 20
    assert len(model.batch_sizes) < 20
    assert max(model.batch_sizes) <= 8
    assert model.threads == {"tiergate-embed-0"}  # one lane, one thread


async def test_event_loop_keeps_running_while_a_batch_computes() -> None:
    model = SlowModel(0.4)
    batcher = MicroBatcher(model, max_batch=4, max_wait_ms=1)
    ticks: list[float] = []

    async def heartbeat() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    beat = asyncio.create_task(heartbeat())
    try:
        started = time.perf_counter()
        await batcher.submit(["slow"])
        elapsed = time.perf_counter() - started
    finally:
        beat.cancel()
        batcher.close()
    assert elapsed >= 0.4
    assert len(ticks) >= 15  # ~40 at 10 ms; a blocked loop would tick once
    assert max(np.diff(ticks)) < 0.2


async def test_a_failing_batch_fails_its_callers_only() -> None:
    batcher = MicroBatcher(SlowModel(0.0), max_batch=1, max_wait_ms=0)
    try:
        with pytest.raises(EmbeddingFailed, match="model failure"):
            await batcher.submit(["boom"])
        ok = await batcher.submit(["fine"])
        assert ok.shape == (1, 2)
    finally:
        batcher.close()
    with pytest.raises(BatcherClosed):
        await batcher.submit(["late"])


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        MicroBatcher(SlowModel(0.0), max_batch=0)


async def test_without_a_wait_a_lone_text_goes_at_once_and_batches_still_form() -> None:
    # The default: no wait for company; what queues while a batch runs is the next batch.
    model = SlowModel(0.05)
    batcher = MicroBatcher(model, max_batch=8)
    waiting = MicroBatcher(SlowModel(0.0), max_batch=8, max_wait_ms=1000)
    try:
        started = time.perf_counter()
        await batcher.submit(["alone"])
        alone_s = time.perf_counter() - started
        started = time.perf_counter()
        await waiting.submit(["alone"])
        waited_s = time.perf_counter() - started
        model.batch_sizes.clear()
        texts = [f"t{i}" for i in range(20)]
        results = await asyncio.gather(*(batcher.submit([t]) for t in texts))
    finally:
        batcher.close()
        waiting.close()
    assert waited_s >= 1.0  # a configured wait holds a lone text for company
    assert alone_s < 0.5  # the model's 50 ms and a thread hop, no wait
    assert [float(r[0, 0]) for r in results] == [float(len(t)) for t in texts]
    assert sum(model.batch_sizes) == 20
    assert len(model.batch_sizes) < 20  # texts queued behind a running batch went together
    assert max(model.batch_sizes) <= 8
