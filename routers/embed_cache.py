"""Vectors of repeated prompts, kept in a bounded LRU keyed by the text's hash.

A repeated prompt (a retry, a template with the same last user message, a replica of
a batch job) is embedded once; the lookup is a dict probe on the event loop, far below
the cost of a batch round trip to the embedder worker.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from routers.embedding import SyncEmbedder


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class CachedEmbedder:
    """Any embedder with an LRU of ``size`` vectors in front; the same protocol."""

    def __init__(self, inner: SyncEmbedder, size: int) -> None:
        if size < 1:
            raise ValueError("the embedding cache needs room for one vector at least")
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.size = size
        self.hits = 0
        self.misses = 0
        self._vectors: OrderedDict[bytes, npt.NDArray[np.float32]] = OrderedDict()

    def _split(
        self, texts: Sequence[str]
    ) -> tuple[list[bytes], dict[int, npt.NDArray[np.float32]], list[int]]:
        keys = [text_key(t) for t in texts]
        found: dict[int, npt.NDArray[np.float32]] = {}
        missing: list[int] = []
        for i, key in enumerate(keys):
            vector = self._vectors.get(key)
            if vector is None:
                missing.append(i)
            else:
                self._vectors.move_to_end(key)
                found[i] = vector
        self.hits += len(found)
        self.misses += len(missing)
        return keys, found, missing

    def _join(
        self,
        keys: list[bytes],
        found: dict[int, npt.NDArray[np.float32]],
        missing: list[int],
        computed: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]:
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        for i, vector in found.items():
            out[i] = vector
        for row, i in enumerate(missing):
            vector = computed[row].copy()  # not a view: the batch array may be large
            vector.flags.writeable = False  # shared by every later request
            out[i] = vector
            self._vectors[keys[i]] = vector
            self._vectors.move_to_end(keys[i])
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)
        return out

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        keys, found, missing = self._split(texts)
        computed = self.inner.embed_sync([texts[i] for i in missing]) if missing else None
        return self._join(keys, found, missing, computed if computed is not None else _empty())

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        keys, found, missing = self._split(texts)
        computed = await self.inner.embed([texts[i] for i in missing]) if missing else _empty()
        return self._join(keys, found, missing, computed)

    @property
    def entries(self) -> int:  # not ``__len__``: an empty cache must not read as falsy
        return len(self._vectors)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _empty() -> npt.NDArray[np.float32]:
    return np.zeros((0, 0), dtype=np.float32)
