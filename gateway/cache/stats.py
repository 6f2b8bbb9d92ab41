"""The cache's figures for the admin API: this replica's ``CacheCounters``, and the
per-tenant figures summed over every replica (``TenantStats``).

Each replica counts into a local delta (a dict add on the lookup path, no round trip)
and a background task adds the deltas to the store every ``FLUSH_S`` (Redis: one
``HINCRBYFLOAT`` per field into the tenant's stats hash), the way the ledger's daily
aggregates are shared. Read back: what the store holds plus this replica's unflushed
delta. Fields: ``lookups``, ``exact_hits``, ``semantic_hits``, ``refused:<reason>``,
``verified`` (learned-verifier calls), ``verify_ms`` (their summed time) and
``verify_ms:<bound>`` (a histogram, so p50 / p99 come from counters).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.stores.cache.storage import CacheUnavailable

log = logging.getLogger(__name__)

FLUSH_S = 1.0
BOUNDS_MS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)
Flush = Callable[[str, dict[str, float]], Awaitable[None]]
Read = Callable[[str], Awaitable[dict[str, float]]]


def bucket(ms: float) -> str:
    i = bisect.bisect_left(BOUNDS_MS, ms)
    return f"verify_ms:{BOUNDS_MS[i] if i < len(BOUNDS_MS) else 'inf'}"


def latency_quantile(fields: Mapping[str, float], q: float) -> float | None:
    """The upper bound (ms) of the bucket holding the q-quantile; None with no samples."""
    counts = [(b, fields.get(f"verify_ms:{b}", 0.0)) for b in BOUNDS_MS]
    counts.append((math.inf, fields.get("verify_ms:inf", 0.0)))
    total = sum(c for _, c in counts)
    if total <= 0:
        return None
    rank, seen = max(math.ceil(q * total - 1e-9), 1), 0.0
    for bound, count in counts:
        seen += count
        if seen >= rank:
            return bound if bound != math.inf else BOUNDS_MS[-1]
    return BOUNDS_MS[-1]


@dataclass(slots=True)
class CacheCounters:
    exact_hits: int = 0
    semantic_hits: int = 0
    refused: int = 0  # semantic candidates above the threshold the verifier turned down
    refused_by_reason: dict[str, int] = field(default_factory=dict)
    forgotten: int = 0  # entries evicted by feedback
    misses: int = 0
    bypassed: int = 0
    stored: int = 0
    unavailable: int = 0
    saved_usd: float = 0.0
    by_reason: dict[str, int] = field(default_factory=dict)
    semantic_by_tenant: dict[str, int] = field(default_factory=dict)


class TenantStats:
    """Counts by tenant namespace; ``flush``/``read`` are the storage's (shared) ones."""

    def __init__(self, flush: Flush, read: Read) -> None:
        self._flush = flush
        self._read = read
        self._delta: dict[str, dict[str, float]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, ns: str, field: str, value: float = 1.0) -> None:
        fields = self._delta.setdefault(ns, {})
        fields[field] = fields.get(field, 0.0) + value

    def verified(self, ns: str, ms: float) -> None:
        self.add(ns, "verified")
        self.add(ns, "verify_ms", ms)
        self.add(ns, bucket(ms))

    async def flush(self) -> None:
        pending, self._delta = self._delta, {}
        for ns, fields in pending.items():
            try:
                await self._flush(ns, fields)
            except CacheUnavailable as exc:  # keep the counts for the next flush
                log.debug("cache stats flush failed: %s", exc)
                for name, value in fields.items():
                    self.add(ns, name, value)
                return

    async def read(self, ns: str) -> dict[str, float]:
        stored = await self._read(ns)
        for name, value in self._delta.get(ns, {}).items():
            stored[name] = stored.get(name, 0.0) + value
        return stored

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tiergate-cache-stats")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            await self.flush()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(CacheUnavailable, TimeoutError):
            await self.flush()


def summary(fields: Mapping[str, float]) -> dict[str, Any]:
    """The admin API's view of one tenant's fields."""
    verified = fields.get("verified", 0.0)
    return {
        "lookups": int(fields.get("lookups", 0)),
        "exact_hits": int(fields.get("exact_hits", 0)),
        "semantic_hits": int(fields.get("semantic_hits", 0)),
        "refused": {
            name.removeprefix("refused:"): int(value)
            for name, value in sorted(fields.items())
            if name.startswith("refused:")
        },
        "verifier": {
            "calls": int(verified),
            "mean_ms": fields.get("verify_ms", 0.0) / verified if verified else None,
            "p50_ms": latency_quantile(fields, 0.5),
            "p99_ms": latency_quantile(fields, 0.99),
        },
    }
