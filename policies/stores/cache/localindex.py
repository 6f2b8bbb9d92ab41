"""An in-process vector index: per tenant, per prefix, a matrix searched by dot product.

Vectors are L2-normalised, so the dot product is the cosine. Grouping by prefix means
a search only ever sees entries whose conversation and parameters match exactly, and
the groups stay small. Used by the memory store and by each replica on Redis 7.

An entry may carry the time its source expires (unix seconds); ``expire`` then drops a
bounded number of those past due, oldest first, so vectors of entries that expired
without anyone saying so (a tenant gone idle) do not stay in memory.
"""

from __future__ import annotations

import asyncio
import heapq
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]

# Searching more rows than this goes to a worker thread instead of the event loop.
INLINE_ROWS = 2048


@dataclass(slots=True)
class _Group:
    dim: int
    matrix: Vector = field(init=False)
    digests: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.matrix = np.zeros((8, self.dim), dtype=np.float32)

    def add(self, digest: str, vector: Vector) -> None:
        row = self.rows.get(digest)
        if row is None:
            row = len(self.digests)
            if row == len(self.matrix):
                grown = np.zeros((2 * len(self.matrix), self.dim), dtype=np.float32)
                grown[:row] = self.matrix[:row]
                self.matrix = grown
            self.digests.append(digest)
            self.rows[digest] = row
        self.matrix[row] = vector

    def remove(self, digest: str) -> bool:
        row = self.rows.pop(digest, None)
        if row is None:
            return False
        last = len(self.digests) - 1
        if row != last:
            moved = self.digests[last]
            self.matrix[row] = self.matrix[last]
            self.digests[row] = moved
            self.rows[moved] = row
        self.digests.pop()
        return True

    def top(self, vector: Vector, count: int) -> list[tuple[str, float]]:
        return _top(self.matrix, list(self.digests), vector, count)


def _top(matrix: Vector, digests: list[str], vector: Vector, count: int) -> list[tuple[str, float]]:
    """Best-first ``(digest, cosine)``; run on a snapshot of the digests, so a row moved
    meanwhile yields at worst a wrong candidate, which the caller re-scores anyway."""
    size = len(digests)
    scores = matrix[:size] @ vector
    if size > count:
        best = np.argpartition(-scores, count)[:count]
    else:
        best = np.arange(size)
    ordered = best[np.argsort(-scores[best])]
    return [(digests[i], float(scores[i])) for i in ordered]


class LocalIndex:
    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], _Group] = {}
        self._where: dict[tuple[str, str], str] = {}  # (ns, digest) → prefix
        self._expires: dict[tuple[str, str], float] = {}
        # (expires, ns, digest), a min-heap; an item whose entry was removed or given a
        # later time is stale and skipped when it comes up (it comes up within one TTL).
        self._due: list[tuple[float, str, str]] = []

    def __len__(self) -> int:
        return len(self._where)

    def has(self, ns: str, digest: str) -> bool:
        return (ns, digest) in self._where

    def count(self, ns: str) -> int:
        return sum(len(g.digests) for (n, _), g in self._groups.items() if n == ns)

    def add(
        self, ns: str, digest: str, prefix: str, vector: Vector, expires: float | None = None
    ) -> None:
        old = self._where.get((ns, digest))
        if old is not None and old != prefix:
            self.remove(ns, digest)
        group = self._groups.get((ns, prefix))
        if group is None:
            group = self._groups[(ns, prefix)] = _Group(dim=len(vector))
        group.add(digest, vector)
        self._where[(ns, digest)] = prefix
        if expires is None:
            self._expires.pop((ns, digest), None)
        else:
            self._expires[(ns, digest)] = expires
            heapq.heappush(self._due, (expires, ns, digest))

    def pending(self) -> int:
        """Expiry times held, stale ones included (bounded by the adds of one TTL)."""
        return len(self._due)

    def expire(self, now: float, limit: int) -> int:
        """Remove the entries whose expiry time is before ``now``, looking at no more than
        ``limit`` expiry times (stale ones included): the work per call is bounded."""
        removed = 0
        for _ in range(limit):
            if not self._due or self._due[0][0] > now:
                break
            expires, ns, digest = heapq.heappop(self._due)
            if self._expires.get((ns, digest)) == expires:
                self.remove(ns, digest)
                removed += 1
        return removed

    def remove(self, ns: str, digest: str) -> None:
        self._expires.pop((ns, digest), None)
        prefix = self._where.pop((ns, digest), None)
        if prefix is None:
            return
        group = self._groups[(ns, prefix)]
        group.remove(digest)
        if not group.digests:
            del self._groups[(ns, prefix)]

    def clear(self, ns: str | None = None) -> None:
        if ns is None:
            self._groups.clear()
            self._where.clear()
            self._expires.clear()
            self._due.clear()
            return
        for key in [k for k in self._groups if k[0] == ns]:
            del self._groups[key]
        for key in [k for k in self._where if k[0] == ns]:
            del self._where[key]
            self._expires.pop(key, None)

    async def search(
        self, ns: str, prefix: str, vector: Vector, count: int
    ) -> list[tuple[str, float]]:
        """The ``count`` nearest entries of this tenant with this exact prefix, best first."""
        group = self._groups.get((ns, prefix))
        if group is None:
            return []
        if len(group.digests) <= INLINE_ROWS:
            return group.top(vector, count)
        return await asyncio.to_thread(_top, group.matrix, list(group.digests), vector, count)
