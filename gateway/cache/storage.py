"""The cache storage seam, and the one place that picks an implementation.

``CacheStorage`` keeps records under exact digests and, for entries that have a
vector, finds candidates with the same prefix by meaning. It knows nothing of
policy; ``PromptCache`` decides what to look up and store, and verifies candidates.

memory          one process: dicts and a ``LocalIndex``
redis-vectorset Redis 8: entries in hashes, vectors in one vector set per tenant
redis-stream    Redis 7: entries (with vectors) in hashes, a ``LocalIndex`` per
                replica kept in sync through a stream all replicas tail
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gateway.cache.keys import CacheKeys
from policies.schema import CacheConfig
from policies.store import RedisStore, Store, StoreUnavailable

log = logging.getLogger(__name__)

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

    async def flush(self, keys: CacheKeys) -> int: ...

    async def usage(self, keys: CacheKeys) -> TenantUsage: ...

    async def aclose(self) -> None: ...


async def has_vector_sets(store: RedisStore) -> bool:
    """Whether the server knows ``VADD`` (Redis 8 vector sets)."""
    from redis.exceptions import RedisError, ResponseError

    try:
        await store.redis.execute_command("VCARD", "tg:cache:capability-probe")  # type: ignore[no-untyped-call]
    except ResponseError:
        return False  # "unknown command": Redis 7 or older
    except RedisError as exc:
        raise CacheUnavailable(f"capability check failed: {exc}") from exc
    return True


async def open_cache_storage(store: Store, config: CacheConfig) -> CacheStorage:
    """Pick the storage for this store and server, detected once at startup."""
    from gateway.cache.memory import MemoryStorage

    if not isinstance(store, RedisStore):
        return MemoryStorage()
    from gateway.cache.redisbase import cache_client

    client = cache_client(store.url, config.timeout_s)
    index = config.index
    if index == "auto":
        try:
            index = "vectorset" if await has_vector_sets(store) else "stream"
        except CacheUnavailable as exc:
            log.warning("%s; assuming no vector sets", exc)
            index = "stream"
    if index == "vectorset":
        from gateway.cache.vectorsets import VectorSetStorage

        return VectorSetStorage(client)
    from gateway.cache.streamindex import StreamIndexStorage

    return StreamIndexStorage(client, root=config.key_prefix, maxlen=config.stream_maxlen)
