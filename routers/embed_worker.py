"""The embedder in worker processes, so MiniLM never runs on the event loop's core.

Why processes: a worker thread still holds the GIL while the tokenizer and the ONNX
session's Python glue run, so at high request rates the model takes turns with the event
loop. Each worker is ``python -m routers.embed_worker FD``: it builds the configured
in-process embedder and answers batches over a pipe. The parent keeps the micro-batching
(one batcher lane per worker) and the one-embedding-per-request sharing.

A worker that dies, or takes longer than ``worker_timeout_s`` over one batch, is killed
and started again; the callers of that batch get ``EmbeddingFailed`` (their requests go
to the default tier), never a hang.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from policies.routing_spec import ClassifierConfig
from routers.batching import EmbeddingFailed, MicroBatcher
from routers.embedding import EmbedderUnavailable

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # the first start may export the ONNX graph


class EmbedWorker:
    """One worker process and its end of the pipe; ``embed`` is called from one thread
    at a time (a batcher lane; ``embed_sync`` callers take the lock too)."""

    def __init__(self, config: ClassifierConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.restarts = 0
        self.name = ""
        self.dim = 0
        self.verifier_dir: str | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._start()

    @property
    def pid(self) -> int | None:
        return None if self._popen is None else self._popen.pid

    def _start(self) -> None:
        parent, child = Pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._popen = subprocess.Popen(
            [sys.executable, "-m", "routers.embed_worker", str(child.fileno())],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            env=env,
        )
        child.close()
        self._conn = parent
        try:
            parent.send(self.config.model_dump(mode="json"))
            if not parent.poll(START_TIMEOUT_S):
                raise EmbedderUnavailable("the embedder worker did not start in time")
            kind, payload = parent.recv()
        except (EOFError, OSError) as exc:
            self._kill()
            raise EmbedderUnavailable(f"the embedder worker exited while starting: {exc}") from exc
        if kind != "ready":
            self._kill()
            raise EmbedderUnavailable(f"embedder worker: {payload}")
        self.name, self.dim = payload
        log.info("embedder worker %d ready (%s)", self._popen.pid, self.name)
        if self.verifier_dir is not None:
            self._load_verifier(parent, self.verifier_dir)

    def _load_verifier(self, conn: Connection, folder: str) -> None:
        try:
            conn.send(("load_verifier", folder))
            if not conn.poll(START_TIMEOUT_S):
                raise EmbedderUnavailable("the verifier did not load in time")
            kind, payload = conn.recv()
        except (EOFError, OSError) as exc:
            self._kill()
            raise EmbedderUnavailable(f"the worker exited loading the verifier: {exc}") from exc
        if kind != "ready":
            raise EmbedderUnavailable(f"verifier: {payload}")

    def load_verifier(self, folder: str) -> None:
        """Build the cross-encoder in this worker now, and in every restart of it."""
        with self.lock:
            if self._conn is None:
                raise EmbedderUnavailable("no embedder worker is running")
            self._load_verifier(self._conn, folder)
            self.verifier_dir = folder

    def _kill(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._popen is not None:
            self._popen.kill()
            self._popen.wait()
            self._popen = None

    def _restart(self, why: str) -> None:
        log.warning("embedder worker %s %s: restarting it", self.pid, why)
        self._kill()
        self.restarts += 1
        try:
            self._start()
        except EmbedderUnavailable as exc:  # the next batch tries again
            log.error("embedder worker restart failed: %s", exc)

    def _ask(self, op: str, payload: object, answer: str) -> Any:
        with self.lock:
            if self._conn is None:
                self._restart("is not running")
            conn = self._conn
            if conn is None:
                raise EmbeddingFailed("no embedder worker is running")
            try:
                conn.send((op, payload))
                if not conn.poll(self.config.worker_timeout_s):
                    self._restart(f"took over {self.config.worker_timeout_s} s on one batch")
                    raise EmbeddingFailed("the embedder worker was stuck (restarted)")
                kind, result = conn.recv()
            except (EOFError, OSError) as exc:
                self._restart(f"died ({type(exc).__name__})")
                raise EmbeddingFailed("the embedder worker died (restarted)") from exc
        if kind != answer:
            raise EmbeddingFailed(str(result))
        return result

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors: npt.NDArray[np.float32] = self._ask("embed", list(texts), "vectors")
        return vectors

    def verify(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """P(same question) per ``(cached, asked)``; needs ``load_verifier`` first."""
        scores: list[float] = self._ask("verify", [tuple(p) for p in pairs], "scores")
        return scores

    def close(self) -> None:
        with self.lock:
            self._kill()


class ProcessEmbedder:
    """``config.workers`` embedder processes behind one micro-batcher (a lane each)."""

    def __init__(self, config: ClassifierConfig) -> None:
        self.workers: list[EmbedWorker] = []
        try:
            for _ in range(config.workers):
                self.workers.append(EmbedWorker(config))
        except EmbedderUnavailable:
            for worker in self.workers:
                worker.close()
            raise
        first = self.workers[0]
        self.name, self.dim = first.name, first.dim
        self.max_batch = config.max_batch
        self._next_verifier = 0
        self._batcher = MicroBatcher(
            [w.embed for w in self.workers], config.max_batch, config.max_wait_ms
        )

    @property
    def batcher(self) -> MicroBatcher:
        return self._batcher

    @property
    def pids(self) -> list[int]:
        return [pid for pid in (w.pid for w in self.workers) if pid is not None]

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Any number of texts, off-line (the CLI's batch tools): in pieces of
        ``max_batch``, each well inside the worker timeout, spread over every worker."""
        size = self.max_batch
        pieces = [texts[i : i + size] for i in range(0, len(texts), size)]
        if len(pieces) <= 1 or len(self.workers) == 1:
            done = [self.workers[0].embed(piece) for piece in pieces]
        else:
            with ThreadPoolExecutor(len(self.workers)) as pool:
                lanes = [pool.submit(self._lane, i, pieces) for i in range(len(self.workers))]
                parts = {index: vectors for lane in lanes for index, vectors in lane.result()}
            done = [parts[i] for i in range(len(pieces))]
        return np.concatenate(done) if done else np.zeros((0, self.dim), dtype=np.float32)

    def _lane(
        self, lane: int, pieces: Sequence[Sequence[str]]
    ) -> list[tuple[int, npt.NDArray[np.float32]]]:
        worker, step = self.workers[lane], len(self.workers)
        return [(i, worker.embed(pieces[i])) for i in range(lane, len(pieces), step)]

    def load_verifier(self, folder: str) -> None:
        for worker in self.workers:
            worker.load_verifier(folder)

    async def verify(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """The verifier in the least recently used worker's process, off the event loop."""
        worker = self.workers[self._next_verifier % len(self.workers)]
        self._next_verifier += 1
        return await asyncio.to_thread(worker.verify, pairs)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self._batcher.submit(texts)

    def close(self) -> None:
        self._batcher.close()
        for worker in self.workers:
            worker.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


def _serve(conn: Connection) -> None:
    from routers.embedders import build_embedder

    # Ctrl-C reaches the whole process group: the gateway stops its workers itself (a
    # closed pipe ends this loop), so they outlive neither it nor its shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = ClassifierConfig.model_validate(conn.recv())
    try:
        embedder = build_embedder(spec.model_copy(update={"workers": 0, "embedding_cache": 0}))
    except EmbedderUnavailable as exc:
        conn.send(("error", str(exc)))
        return
    conn.send(("ready", (embedder.name, embedder.dim)))
    verifier: Any = None
    try:
        while True:
            try:
                op, payload = conn.recv()
            except EOFError:  # the gateway closed its end: stop
                return
            try:
                if op == "embed":
                    conn.send(("vectors", embedder.embed_sync(payload)))
                elif op == "verify" and verifier is not None:
                    conn.send(("scores", verifier.score(payload)))
                elif op == "load_verifier":
                    from routers.verifier.model import CrossEncoderVerifier

                    verifier = CrossEncoderVerifier(Path(payload))
                    conn.send(("ready", None))
                else:
                    conn.send(("error", f"unknown or unready operation {op!r}"))
            except (RuntimeError, ValueError, MemoryError, TypeError, OSError) as exc:
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        asyncio.run(embedder.aclose())


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
