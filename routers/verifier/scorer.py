"""Where the learned verifier runs: next to the embedding, off the event loop's core.

``PairScorer`` is the seam the cache sees: ``score(pairs) -> P(same question)``. With
embedder worker processes the cross-encoder is built in each of them (``WorkerScorer``);
otherwise it runs in a worker thread of this process (``ThreadScorer``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from routers.embed_cache import CachedEmbedder
from routers.embed_worker import ProcessEmbedder
from routers.embedding import Embedder
from routers.verifier.model import MODEL_DIR, CrossEncoderVerifier


class PairScorer(Protocol):
    where: str  # "worker" or "thread", for the log and the admin API

    async def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...


class WorkerScorer:
    where = "worker"

    def __init__(self, workers: ProcessEmbedder) -> None:
        self.workers = workers

    async def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return await self.workers.verify(pairs)


class ThreadScorer:
    where = "thread"

    def __init__(self, verifier: CrossEncoderVerifier) -> None:
        self.verifier = verifier

    async def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return await asyncio.to_thread(self.verifier.score, pairs)


def build_pair_scorer(embedder: Embedder | None, folder: Path | None = None) -> PairScorer:
    """Blocking (loads the model): call it off the loop. ``EmbedderUnavailable`` when
    the model or onnxruntime is missing."""
    folder = folder or MODEL_DIR
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    if isinstance(inner, ProcessEmbedder):
        inner.load_verifier(str(folder))
        return WorkerScorer(inner)
    return ThreadScorer(CrossEncoderVerifier(folder))
