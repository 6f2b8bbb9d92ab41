"""A mergeable streaming quantile sketch of complexity scores, and thresholds from it.

Scores are probabilities, so a fixed histogram is enough: ``BINS`` bins evenly spaced
on the logit scale over [-LOGIT_SPAN, LOGIT_SPAN] (fine near 0 and 1, where calibrated
scores crowd), each a count. Two replicas' sketches merge by adding counts, which is
what lets them share one sketch through the store with plain ``HINCRBY``s. A quantile
is read by walking the cumulative counts and interpolating inside the bin (in logit
space); with 4,096 bins a bin is 0.0044 logits wide (0.1 % of the score around 0.4),
so even a classifier whose scores crowd into a band a few hundredths wide gets
thresholds whose own error is far below a point of share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

BINS = 4096
LOGIT_SPAN = 9.0  # scores beyond 1.2e-4 / 1 - 1.2e-4 share the end bins
_WIDTH = 2 * LOGIT_SPAN / BINS


def _logit(score: float) -> float:
    p = min(max(score, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def bin_of(score: float) -> int:
    return min(max(int((_logit(score) + LOGIT_SPAN) / _WIDTH), 0), BINS - 1)


def _edge(position: float) -> float:
    """The score at a position on the bin axis (bin ``b`` spans ``[b, b + 1)``)."""
    return _sigmoid(position * _WIDTH - LOGIT_SPAN)


def quantile(counts: Mapping[int, int], fraction: float) -> float:
    """The score below which ``fraction`` of the counted scores fall."""
    total = sum(counts.values())
    if total <= 0:
        raise ValueError("an empty sketch has no quantiles")
    if fraction <= 0.0:
        return 0.0
    if fraction >= 1.0:
        return 1.0
    wanted = fraction * total
    seen = 0.0
    for b in sorted(counts):
        n = counts[b]
        if n > 0 and seen + n >= wanted:
            return _edge(b + (wanted - seen) / n)
        seen += n
    return 1.0


def thresholds_for(
    counts: Mapping[int, int], tiers: Sequence[str], shares: Mapping[str, float]
) -> tuple[float, float]:
    """(low, high) such that ``shares[tiers[0]]`` of the scores fall below low and
    ``shares[tiers[-1]]`` at or above high (``routers.decision.tier_for_score``)."""
    cheapest = shares[tiers[0]]
    if len(tiers) == 1:
        return 0.0, 0.0
    middle = shares[tiers[1]] if len(tiers) == 3 else 0.0
    low = quantile(counts, cheapest)
    high = low if len(tiers) == 2 else quantile(counts, cheapest + middle)
    return low, max(low, high)
