"""Cache storage inside this process, for a gateway without Redis (one replica only)."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass

from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.localindex import LocalIndex
from policies.stores.cache.storage import Candidate, Semantic, TenantUsage, Vector


@dataclass(frozen=True, slots=True)
class _Entry:
    record: bytes
    expires: float
    semantic: Semantic | None


class MemoryStorage:
    kind = "memory"

    def __init__(self) -> None:
        # Per tenant, in insertion order: the oldest entry is evicted first.
        self._entries: dict[str, OrderedDict[str, _Entry]] = {}
        self._index = LocalIndex()
        self._stats: dict[str, dict[str, float]] = {}
        self._labels: dict[str, deque[bytes]] = {}

    async def start(self, namespaces: list[str]) -> None:
        return None

    def _live(self, keys: CacheKeys, digest: str) -> _Entry | None:
        entries = self._entries.get(keys.ns)
        entry = entries.get(digest) if entries is not None else None
        if entry is None:
            return None
        if entry.expires <= time.monotonic():
            self._drop(keys.ns, digest)
            return None
        return entry

    def _drop(self, ns: str, digest: str) -> None:
        self._entries.get(ns, OrderedDict()).pop(digest, None)
        self._index.remove(ns, digest)

    async def get(self, keys: CacheKeys, digest: str) -> bytes | None:
        entry = self._live(keys, digest)
        return entry.record if entry is not None else None

    async def put(
        self,
        keys: CacheKeys,
        digest: str,
        record: bytes,
        semantic: Semantic | None,
        ttl_s: float,
        max_entries: int,
    ) -> None:
        entries = self._entries.setdefault(keys.ns, OrderedDict())
        entries.pop(digest, None)
        entries[digest] = _Entry(record, time.monotonic() + ttl_s, semantic)
        if semantic is not None:
            self._index.add(keys.ns, digest, semantic.prefix, semantic.vector)
        while len(entries) > max_entries:
            oldest = next(iter(entries))
            self._drop(keys.ns, oldest)

    async def candidates(
        self, keys: CacheKeys, prefix: str, vector: Vector, count: int
    ) -> list[Candidate]:
        found: list[Candidate] = []
        for digest, _ in await self._index.search(keys.ns, prefix, vector, count):
            entry = self._live(keys, digest)
            if entry is not None and entry.semantic is not None:
                found.append(
                    Candidate(digest, entry.record, entry.semantic.text, entry.semantic.vector)
                )
        return found

    async def remove(self, keys: CacheKeys, digest: str) -> str | None:
        entry = self._live(keys, digest)
        if entry is None:
            return None
        self._drop(keys.ns, digest)
        return entry.semantic.text if entry.semantic is not None else ""

    async def add_stats(self, keys: CacheKeys, fields: dict[str, float]) -> None:
        stats = self._stats.setdefault(keys.ns, {})
        for name, value in fields.items():
            stats[name] = stats.get(name, 0.0) + value

    async def read_stats(self, keys: CacheKeys) -> dict[str, float]:
        return dict(self._stats.get(keys.ns, {}))

    async def add_label(self, keys: CacheKeys, label: bytes, cap: int) -> None:
        labels = self._labels.setdefault(keys.ns, deque(maxlen=cap))
        if labels.maxlen != cap:
            labels = self._labels[keys.ns] = deque(labels, maxlen=cap)
        labels.appendleft(label)

    async def labels(self, keys: CacheKeys, count: int) -> list[bytes]:
        return list(self._labels.get(keys.ns, ()))[:count]

    async def flush(self, keys: CacheKeys) -> int:
        removed = len(self._entries.pop(keys.ns, OrderedDict()))
        self._index.clear(keys.ns)
        return removed

    async def usage(self, keys: CacheKeys) -> TenantUsage:
        entries = self._entries.get(keys.ns, OrderedDict())
        size = 0
        for entry in entries.values():
            size += len(entry.record) + 64
            if entry.semantic is not None:
                size += len(entry.semantic.text.encode()) + entry.semantic.vector.nbytes
        return TenantUsage(entries=len(entries), memory_bytes=size)

    async def aclose(self) -> None:
        self._entries.clear()
        self._index.clear()
