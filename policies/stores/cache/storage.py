"""The cache storage seam (protocol only; ``gateway/cache/build.py`` picks an implementation).

``CacheStorage`` keeps records under exact digests and, for entries that have a
vector, finds candidates with the same prefix by meaning. It knows nothing of
policy; ``PromptCache`` decides what to look up and store, and verifies candidates.

memory          one process: dicts and a ``LocalIndex``
redis-vectorset Redis 8: entries in hashes, vectors in one vector set per tenant
redis-stream    Redis 7: entries (with vectors) in hashes, a ``LocalIndex`` per
                replica kept in sync through a stream all replicas tail
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from policies.stores.cache.keys import CacheKeys
from policies.stores.store import StoreUnavailable

Vector = npt.NDArray[np.float32]


class CacheUnavailable(StoreUnavailable):
    """The cache's store failed or was too slow; the request goes on without the cache."""


@dataclass(frozen=True, slots=True)
class Semantic:
    """What a stored entry needs to be found by meaning."""

    prefix: str
    text: str
    vector: Vector


@dataclass(frozen=True, slots=True)
class Candidate:
    digest: str
    record: bytes
    text: str
    vector: Vector


@dataclass(frozen=True, slots=True)
class TenantUsage:
    entries: int
    memory_bytes: int  # in the store (Redis: sampled estimate)
    index_bytes: int = 0  # this replica's in-memory index, where there is one


class CacheStorage(Protocol):
    kind: str

    async def start(self, namespaces: list[str]) -> None: ...

    async def get(self, keys: CacheKeys, digest: str) -> bytes | None: ...

    async def put(
        self,
        keys: CacheKeys,
        digest: str,
        record: bytes,
        semantic: Semantic | None,
        ttl_s: float,
        max_entries: int,
    ) -> None: ...

    async def candidates(
        self, keys: CacheKeys, prefix: str, vector: Vector, count: int
    ) -> list[Candidate]:
        """Up to ``count`` live entries with this prefix, nearest first (approximately)."""
        ...

    async def remove(self, keys: CacheKeys, digest: str) -> str | None:
        """Evict one entry from every index; its compared text ("" for an entry stored
        without one), or None when there was no such entry."""
        ...

    async def add_stats(self, keys: CacheKeys, fields: dict[str, float]) -> None:
        """Add to the tenant's shared lookup figures (``gateway.cache.stats``)."""
        ...

    async def read_stats(self, keys: CacheKeys) -> dict[str, float]: ...

    async def add_label(self, keys: CacheKeys, label: bytes, cap: int) -> None:
        """Keep a feedback label; only the newest ``cap`` per tenant are kept."""
        ...

    async def labels(self, keys: CacheKeys, count: int) -> list[bytes]:
        """The newest ``count`` labels, newest first."""
        ...

    async def flush(self, keys: CacheKeys) -> int: ...

    async def usage(self, keys: CacheKeys) -> TenantUsage: ...

    async def aclose(self) -> None: ...
