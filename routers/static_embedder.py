"""A static embedder distilled from the shipped MiniLM: a text's vector is the mean of
its wordpieces' rows in one table, L2-normalised.

Why: on a CPU without VNNI or AMX (most cloud VMs) the MiniLM transformer costs 7-8 ms
of CPU per short prompt and ~28 ms per 200-token one even in int8 (``bench/perf/embed_cpu.py``
on an AVX2 EPYC; issue 33 saw 25 ms a short prompt), the whole cost of ``auto``. A
lookup table costs the tokenizer plus a few dozen row reads: 0.12 and 0.48 ms, and less
for ASCII text, whose wordpieces come a word at a time from a memo
(``routers/static_wordpieces.py``). The
table is MiniLM's own output for every wordpiece, PCA-reduced and Zipf-weighted by
model2vec at build time (``routers/training/corpora/static_embedder.py``, provenance in
docs/classifier.md); serving needs numpy and ``tokenizers`` only, and downloads nothing.

It is cheap enough to run on the event loop for short texts (a thread hop costs more
CPU than the lookup: 0.12 against 0.26 ms a short prompt); longer ones go through the
micro-batcher's thread like any other embedder.

The int8 rows are widened to float32 once at load: a gather of float32 rows is the
fastest form on every x86 CPU (there is no matrix product to gain from VNNI or AMX),
for ~31 MB of memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from routers.batching import MicroBatcher
from routers.embedding import EmbedderUnavailable, leading_words
from routers.static_wordpieces import AsciiWordpieces

SHIPPED_STATIC = Path(__file__).resolve().parent / "model" / "static-minilm.npz"
# Calls up to this many characters run on the caller: ~0.5 ms of WordPiece at most (about
# 0.45 µs a character here), less than a thread hop costs; longer ones go to the thread.
INLINE_CHARS = 1024
Array = npt.NDArray[np.float32]


def load_table(path: Path) -> tuple[Array, str, dict[str, Any]]:
    """The float32 rows, the tokenizer's JSON and the provenance of a built artefact."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta: dict[str, Any] = json.loads(bytes(data["meta"]).decode())
            tokenizer = bytes(data["tokenizer"]).decode()
            codes, scale = data["codes"], data["scale"]
    except (OSError, KeyError, ValueError) as exc:
        raise EmbedderUnavailable(f"{path}: not a static embedder: {exc}") from exc
    rows = codes.astype(np.float32) * scale.astype(np.float32)[:, None]
    return rows, tokenizer, meta


def table_tag(rows: Array) -> str:
    """A short digest of the table: part of the embedder's name, so vectors of another
    build are never mixed with these (trained models, the cache's vector spaces)."""
    import hashlib

    return hashlib.sha256(rows.tobytes()).hexdigest()[:8]


class StaticEmbedder:
    """Text → L2-normalised ``dim``-d vector by table lookup; same protocol as the others."""

    def __init__(
        self,
        path: Path | None = None,
        max_tokens: int = 128,
        max_batch: int = 32,
        max_wait_ms: float = 0.0,
        inline_chars: int = INLINE_CHARS,
    ) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(f"the static embedder needs tokenizers: {exc}") from exc
        self._rows, tokenizer, meta = load_table(path or SHIPPED_STATIC)
        self.dim = int(self._rows.shape[1])
        self.max_tokens = max_tokens
        self.name = f"static-minilm-{self.dim}/{table_tag(self._rows)}/{max_tokens}"
        self._unk: int | None = meta.get("unk_id")
        self._tokenizer: Any = Tokenizer.from_str(tokenizer)
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.no_padding()
        self._ascii = AsciiWordpieces(self._tokenizer, max_tokens)
        self.inline_chars = inline_chars  # texts up to this long are embedded on the caller
        self._batcher = MicroBatcher(self.embed_sync, max_batch, max_wait_ms)

    @property
    def batcher(self) -> MicroBatcher:
        return self._batcher

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        cut = [leading_words(t, self.max_tokens) for t in texts]
        ids = [self._ascii.ids(t) for t in cut]  # None: not ASCII, the tokenizer's
        rest = [t for t, found in zip(cut, ids, strict=True) if found is None]
        encoded = iter(self._encode(rest))
        rows = [next(encoded).ids if found is None else found for found in ids]
        if self._unk is None:
            return rows
        return [[i for i in row if i != self._unk] for row in rows]

    def _encode(self, texts: list[str]) -> list[Any]:
        if len(texts) <= 1:  # ``encode`` skips the batch's thread pool: ~40 % less CPU
            return [self._tokenizer.encode(t, add_special_tokens=False) for t in texts]
        encoded: list[Any] = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return encoded

    def _vector(self, ids: list[int]) -> Array:
        """The rows' sum, normalised (the mean's direction); zero without wordpieces."""
        summed: Array = self._rows[ids].sum(axis=0, dtype=np.float32)
        norm = float(np.sqrt(summed @ summed))
        return summed / np.float32(norm) if norm > 0 else summed

    def embed_sync(self, texts: Sequence[str]) -> Array:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vector(ids) for ids in self._ids(texts)])

    async def embed(self, texts: Sequence[str]) -> Array:
        if sum(len(t) for t in texts) <= self.inline_chars:
            # ~0.1 ms: cheaper here than the hop to a thread and back.
            return self.embed_sync(texts)
        return await self._batcher.submit(texts)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._batcher.close)
