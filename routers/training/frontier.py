"""Judging a routing policy against the fixed tiers: accuracy at the cost it spent.

A held-out set is scored as a deployment would be: each tier (cheapest first) has a
per-row correctness and a per-row cost. The fixed-tier policies are "always tier t";
mixing two of them at random reaches every point on the segment between them, so the
best a policy without information can do at cost x is the upper concave hull of the
fixed tiers at x (flat beyond the best one). A router earns its keep only by its
*margin* above that hull at the cost it actually spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
Tiers = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Point:
    cost: float  # share of always-the-largest-tier's cost
    accuracy: float
    shares: tuple[float, ...]  # of rows per tier


def point(tiers: Tiers, correct: F64, cost: F64) -> Point:
    """Accuracy and cost share when row ``i`` goes to ``tiers[i]``."""
    rows = np.arange(len(tiers))
    counts = np.bincount(tiers, minlength=correct.shape[1])
    return Point(
        float(cost[rows, tiers].sum() / cost[:, -1].sum()),
        float(correct[rows, tiers].mean()),
        tuple(float(c) for c in counts / max(len(tiers), 1)),
    )


def fixed_points(correct: F64, cost: F64) -> list[Point]:
    n = len(correct)
    return [point(np.full(n, t, np.intp), correct, cost) for t in range(correct.shape[1])]


def hull_accuracy(points: Sequence[Point], cost: float) -> float:
    """The best accuracy random mixes of the fixed tiers reach at ``cost`` (at most)."""
    best = max((p.accuracy for p in points if p.cost <= cost + 1e-12), default=float("nan"))
    for a in points:
        for b in points:
            if a.cost < cost < b.cost:
                mix = (cost - a.cost) / (b.cost - a.cost)
                best = max(best, a.accuracy + mix * (b.accuracy - a.accuracy))
    return float(best)


def hull_curve(points: Sequence[Point], grid: F64) -> F64:
    return np.asarray([hull_accuracy(points, float(x)) for x in grid], dtype=np.float64)


def by_length(lengths: F64, correct: F64, cost: F64, shares: F64) -> list[Point]:
    """The length router: the longest ``share`` of rows to the largest tier, the rest to
    the tier below it (the cheapest, with two tiers)."""
    order = np.argsort(-lengths, kind="stable")
    below = max(correct.shape[1] - 2, 0)
    out = []
    for share in shares:
        tiers = np.full(len(lengths), below, np.intp)
        tiers[order[: round(share * len(lengths))]] = correct.shape[1] - 1
        out.append(point(tiers, correct, cost))
    return out
