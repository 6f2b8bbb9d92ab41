"""Micro-batching: concurrent callers' texts go to worker threads in batches.

A batch closes when it holds ``max_batch`` texts or ``max_wait_ms`` after its first
text arrived, whichever is first. The default wait is 0: a batch is whatever queued
while the lane's previous batch ran, so a lone request never waits for company and
batches still grow with the load. The model runs in a worker thread (or, behind it, in
a worker process: ``routers/embed_worker.py``), never on the event loop; each caller
awaits its own future, resolved on its own loop. One thread per lane: lanes share the
queue, so a second lane collects the next batch while the first one's model runs.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

EmbedBatch = Callable[[Sequence[str]], npt.NDArray[np.float32]]


class BatcherClosed(RuntimeError):
    pass


class EmbeddingFailed(RuntimeError):
    """The model raised while embedding a batch; every caller in it gets this."""


@dataclass(frozen=True, slots=True)
class _Job:
    texts: tuple[str, ...]
    future: asyncio.Future[npt.NDArray[np.float32]]
    loop: asyncio.AbstractEventLoop


_STOP = object()


def _resolve(job: _Job, result: npt.NDArray[np.float32] | BaseException) -> None:
    if job.future.done():  # the caller was cancelled meanwhile
        return
    if isinstance(result, BaseException):
        job.future.set_exception(result)
    else:
        job.future.set_result(result)


Result = npt.NDArray[np.float32] | BaseException


def _resolve_all(results: list[tuple[_Job, Result]]) -> None:
    for job, result in results:
        _resolve(job, result)


def _send(results: list[tuple[_Job, Result]]) -> None:
    """One wake-up per caller loop and batch (each ``call_soon_threadsafe`` writes to
    that loop's self-pipe), not one per caller."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Result]]] = {}
    for job, result in results:
        by_loop.setdefault(job.loop, []).append((job, result))
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve_all, batch)
        except RuntimeError:  # that caller's loop is closed: nobody waits any more
            continue


class MicroBatcher:
    """A daemon thread per lane running its ``embed_batch`` over batches of queued texts."""

    def __init__(
        self,
        embed_batch: EmbedBatch | Sequence[EmbedBatch],
        max_batch: int = 32,
        max_wait_ms: float = 0.0,
    ) -> None:
        lanes = [embed_batch] if callable(embed_batch) else list(embed_batch)
        if max_batch < 1 or max_wait_ms < 0 or not lanes:
            raise ValueError("max_batch must be >= 1, max_wait_ms >= 0, one lane at least")
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self._queue: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._closed = False
        self.batches = 0  # counted by the workers: how many model calls ran
        self.texts = 0
        self._count = threading.Lock()
        self._threads = [
            threading.Thread(
                target=self._run, args=(lane,), name=f"tiergate-embed-{n}", daemon=True
            )
            for n, lane in enumerate(lanes)
        ]
        for thread in self._threads:
            thread.start()

    async def submit(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self._closed:
            raise BatcherClosed("the embedder is closed")
        loop = asyncio.get_running_loop()
        job = _Job(tuple(texts), loop.create_future(), loop)
        self._queue.put(job)
        return await job.future

    def _collect(self, first: _Job) -> tuple[list[_Job], bool]:
        jobs, size = [first], len(first.texts)
        deadline = time.monotonic() + self.max_wait_s
        while size < self.max_batch:
            remaining = deadline - time.monotonic()
            try:
                item = (
                    self._queue.get(timeout=remaining)
                    if remaining > 0
                    else self._queue.get_nowait()
                )
            except queue.Empty:
                break
            if item is _STOP:
                return jobs, True
            assert isinstance(item, _Job)
            jobs.append(item)
            size += len(item.texts)
        return jobs, False

    def _run(self, embed_batch: EmbedBatch) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                break
            assert isinstance(item, _Job)
            jobs, stop = self._collect(item)
            texts = [t for job in jobs for t in job.texts]
            try:
                vectors: Result = embed_batch(texts)
            except EmbeddingFailed as exc:
                vectors = exc
            except (RuntimeError, ValueError, MemoryError, OSError) as exc:
                vectors = EmbeddingFailed(f"{type(exc).__name__}: {exc}")
            with self._count:
                self.batches += 1
                self.texts += len(texts)
            results: list[tuple[_Job, Result]] = []
            start = 0
            for job in jobs:
                end = start + len(job.texts)
                results.append(
                    (job, vectors if isinstance(vectors, BaseException) else vectors[start:end])
                )
                start = end
            _send(results)
        self._drain()

    def _drain(self) -> None:
        """Jobs queued behind the stop marker fail instead of waiting forever; the other
        lanes' stop markers go back for them."""
        others = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Job):
                _send([(item, BatcherClosed("the embedder is closed"))])
            else:
                others += 1
        for _ in range(others):
            self._queue.put(_STOP)

    def close(self, timeout_s: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
