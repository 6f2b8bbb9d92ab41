"""Accuracy at equal cost, for judging a per-tier quality model on rows whose per-tier
correctness and cost are known (the feedback replay test, bench/ and docs).

A quality model routes by expected quality - λ·expected cost (the objective's rule);
sweeping λ gives a set of deterministic policies, and any random mix of two of them is
a policy too, so the accuracy reachable at a cost is the upper concave envelope of their
(cost, accuracy) points. The fixed-tier hull (random mixes of "always tier t") is the
same envelope over the fixed tiers: the simplest alternative at that cost.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
LAMBDAS = np.concatenate([[0.0], np.logspace(-2, 7, 361)])


def tiers_for(
    quality: npt.NDArray[np.floating], expected_cost: F64, lam: float
) -> npt.NDArray[np.intp]:
    """Per row, the tier with the best expected quality - λ·expected cost."""
    value = np.asarray(quality, np.float64) - lam * np.asarray(expected_cost, np.float64)
    return np.asarray(np.argmax(value, axis=1), np.intp)


def outcome(tiers: npt.NDArray[np.intp], correct: F64, cost: F64) -> tuple[float, float]:
    """(cost as a share of always the largest tier, accuracy) of routing row i to tiers[i]."""
    rows = np.arange(len(tiers))
    return float(cost[rows, tiers].sum() / cost[:, -1].sum()), float(correct[rows, tiers].mean())


def policy_points(
    quality: npt.NDArray[np.floating], expected_cost: F64, correct: F64, cost: F64
) -> list[tuple[float, float]]:
    """(cost share, accuracy) of the λ rule over a grid of λ."""
    return [outcome(tiers_for(quality, expected_cost, lam), correct, cost) for lam in LAMBDAS]


def fixed_points(correct: F64, cost: F64) -> list[tuple[float, float]]:
    return [
        outcome(np.full(len(correct), t, np.intp), correct, cost) for t in range(correct.shape[1])
    ]


def envelope_at(points: Sequence[tuple[float, float]], budget: float) -> float:
    """The best accuracy a random mix of two of ``points`` reaches at cost ≤ ``budget``
    (NaN when every point costs more)."""
    best = float("nan")
    for c1, a1 in points:
        for c2, a2 in points:
            if c1 <= budget <= c2 and c2 > c1:
                value = a1 + (a2 - a1) * (budget - c1) / (c2 - c1)
            elif c1 <= budget:
                value = a1
            else:
                continue
            best = value if np.isnan(best) else max(best, value)
    return best
