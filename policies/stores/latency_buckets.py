"""Latency histograms inside the daily aggregates: percentiles over every request, cheaply.

Each served request adds one to the bucket its latency (and its time to first token)
falls in, per tier; a percentile is the upper bound of the bucket that holds its rank,
so the dashboard reads "p99 ≤ 750 ms" from a handful of counters instead of re-reading
every event.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

BOUNDS_MS = (
    10, 25, 50, 100, 200, 300, 500, 750, 1000, 1500,
    2000, 3000, 5000, 7500, 10_000, 20_000, 30_000, 60_000, 120_000,
)  # fmt: skip
OVERFLOW = "inf"


def bucket_of(ms: float) -> str:
    """The name of the bucket ``ms`` falls in: its upper bound, or ``inf``."""
    i = bisect.bisect_left(BOUNDS_MS, ms)
    return str(BOUNDS_MS[i]) if i < len(BOUNDS_MS) else OVERFLOW


def quantile(counts: Mapping[str, float], q: float) -> float:
    """The upper bound (ms) of the bucket holding the ``q``-quantile (0 with no counts);
    the overflow bucket reads as the largest bound."""
    total = sum(counts.values())
    if total <= 0:
        return 0.0
    rank = max(math.ceil(q * total - 1e-9), 1)
    seen = 0.0
    for bound in BOUNDS_MS:
        seen += counts.get(str(bound), 0.0)
        if seen >= rank:
            return float(bound)
    return float(BOUNDS_MS[-1])
