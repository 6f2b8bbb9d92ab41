"""RouteLLM's router metrics over one benchmark's requests.

Sort requests by score and send the top fraction ``c`` to the strong model; q(c) is the
mean correctness of that mix. PGR(c) = (q(c) - q_weak) / (q_strong - q_weak);
APGR = trapezoid area of PGR over c at the 10 quantile cut points (0.1 … 1.0, plus c = 0);
CPT(x) = the smallest share of strong calls (on a 1 % grid) whose PGR reaches x.
Ties in a score (the length router has many) are broken at random, seeded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
QUANTILES = np.linspace(0.0, 1.0, 11)
CPT_GRID = np.linspace(0.0, 1.0, 101)


@dataclass(frozen=True, slots=True)
class RouterReport:
    apgr: float
    cpt50: float
    cpt80: float
    pgr: tuple[float, ...]  # at QUANTILES


def _order(scores: FloatArray, seed: int) -> npt.NDArray[np.intp]:
    """Indices from the highest score down, ties in random (seeded) order."""
    tie_break = np.random.default_rng(seed).random(len(scores))
    order: npt.NDArray[np.intp] = np.lexsort((tie_break, -scores))
    return order


def pgr_curve(
    scores: FloatArray, weak: FloatArray, strong: FloatArray, shares: FloatArray, seed: int = 0
) -> FloatArray:
    n = len(scores)
    gap = float(strong.mean() - weak.mean())
    if n == 0 or gap <= 0:
        return np.full(len(shares), np.nan)
    order = _order(scores, seed)
    # gain of sending the k highest-scored requests to the strong model, k = 0..n
    gains = np.concatenate([[0.0], np.cumsum((strong - weak)[order])])
    counts = np.rint(shares * n).astype(int)
    quality = weak.mean() + gains[counts] / n
    return np.asarray((quality - weak.mean()) / gap, dtype=np.float64)


def _area(pgr: FloatArray) -> float:
    return float(np.sum((pgr[1:] + pgr[:-1]) / 2 * np.diff(QUANTILES)))


def apgr(scores: FloatArray, weak: FloatArray, strong: FloatArray, seed: int = 0) -> float:
    return _area(pgr_curve(scores, weak, strong, QUANTILES, seed))


def report(scores: FloatArray, weak: FloatArray, strong: FloatArray, seed: int = 0) -> RouterReport:
    pgr = pgr_curve(scores, weak, strong, QUANTILES, seed)
    fine = pgr_curve(scores, weak, strong, CPT_GRID, seed)

    def cpt(target: float) -> float:
        reached = np.nonzero(fine >= target - 1e-12)[0]
        return float(CPT_GRID[reached[0]]) if len(reached) else float("nan")

    return RouterReport(_area(pgr), cpt(0.5), cpt(0.8), tuple(float(p) for p in pgr))


def apgr_difference_ci(
    first: FloatArray,
    second: FloatArray,
    weak: FloatArray,
    strong: FloatArray,
    draws: int = 400,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Paired bootstrap interval of APGR(first) - APGR(second) over the same requests.

    Rows are resampled with replacement and both routers scored on each resample, so the
    interval is the sampling noise of the *difference* on a benchmark of this size."""

    def difference(rows: IntArray) -> float | None:
        w, s = weak[rows], strong[rows]
        if s.mean() - w.mean() <= 0:  # no gap to recover on this resample
            return None
        return apgr(first[rows], w, s, seed) - apgr(second[rows], w, s, seed)

    return paired_bootstrap(len(weak), difference, draws, seed, level)


def paired_bootstrap(
    n: int,
    difference: Callable[[IntArray], float | None],
    draws: int,
    seed: int,
    level: float = 0.95,
) -> tuple[float, float]:
    """The ``level`` interval of ``difference(rows)`` over ``draws`` resamples of ``n`` rows
    with replacement (a resample it answers None for is skipped; none left: NaNs)."""
    rng = np.random.default_rng(seed)
    diffs = [d for _ in range(draws) if (d := difference(rng.integers(0, n, n))) is not None]
    if not diffs:
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(diffs, [tail, 100 - tail])
    return float(lo), float(hi)


def random_report(
    weak: FloatArray, strong: FloatArray, seed: int = 0, runs: int = 20
) -> RouterReport:
    """The random router, averaged over ``runs`` seeded draws."""
    rng = np.random.default_rng(seed)
    reports = [report(rng.random(len(weak)), weak, strong, seed + i) for i in range(runs)]
    pgr = np.mean([r.pgr for r in reports], axis=0)
    return RouterReport(
        float(np.mean([r.apgr for r in reports])),
        float(np.mean([r.cpt50 for r in reports])),
        float(np.mean([r.cpt80 for r in reports])),
        tuple(float(p) for p in pgr),
    )


@dataclass(frozen=True, slots=True)
class TierMix:
    accuracy: float
    cost_share: float  # cost relative to sending everything to the largest tier
    shares: tuple[float, ...]  # of requests per tier


def tier_mix(tiers: npt.NDArray[np.intp], correct: FloatArray, cost: FloatArray) -> TierMix:
    """Accuracy and cost when row ``i`` goes to ``tiers[i]`` (columns: tiers, cheapest first)."""
    rows = np.arange(len(tiers))
    counts = np.bincount(tiers, minlength=correct.shape[1])
    return TierMix(
        float(correct[rows, tiers].mean()),
        float(cost[rows, tiers].sum() / cost[:, -1].sum()),
        tuple(float(c) for c in counts / len(tiers)),
    )


def best_three_tier(
    scores: FloatArray,
    correct: FloatArray,
    cost: FloatArray,
    budget: float = 0.25,
    seed: int = 0,
    step: float = 0.01,
) -> TierMix:
    """The best accuracy a score reaches within ``budget`` times the always-largest cost.

    The score ranks requests (ties at random, seeded); every split on a ``step`` grid is
    tried: the lowest share to the small tier, the highest to the large, the rest medium.
    Thresholds are then whatever score values realise the best split."""
    order = _order(scores, seed)[::-1]  # lowest score first
    n = len(order)
    c, k = correct[order], cost[order]
    prefix = [np.concatenate([[0.0], np.cumsum(c[:, t])]) for t in range(3)]
    prefix_cost = [np.concatenate([[0.0], np.cumsum(k[:, t])]) for t in range(3)]
    limit = budget * float(cost[:, 2].sum())
    best: tuple[float, int, int] | None = None
    grid = np.rint(np.arange(0.0, 1.0 + step / 2, step) * n).astype(int)
    for small in grid:
        for large_start in grid[grid >= small]:
            spent = (
                prefix_cost[0][small]
                + prefix_cost[1][large_start]
                - prefix_cost[1][small]
                + prefix_cost[2][n]
                - prefix_cost[2][large_start]
            )
            if spent > limit + 1e-12:
                continue
            right = (
                prefix[0][small]
                + prefix[1][large_start]
                - prefix[1][small]
                + prefix[2][n]
                - prefix[2][large_start]
            )
            if best is None or right > best[0] + 1e-12:
                best = (float(right), int(small), int(large_start))
    if best is None:
        return TierMix(float("nan"), float("nan"), (float("nan"),) * 3)
    tiers = np.ones(n, dtype=np.intp)
    tiers[order[: best[1]]] = 0
    tiers[order[best[2] :]] = 2
    return tier_mix(tiers, correct, cost)


def best_two_head_tier(
    scores: FloatArray,
    upper: FloatArray,
    correct: FloatArray,
    cost: FloatArray,
    budget: float = 0.25,
    seed: int = 0,
    step: float = 0.01,
) -> TierMix:
    """``best_three_tier`` with a second score for the large tier: the highest share of
    ``upper`` goes large, then of the rest the lowest share of ``scores`` goes small."""
    n = len(scores)
    by_upper = _order(upper, seed)  # highest first
    by_score = _order(scores, seed)[::-1]  # lowest first
    limit = budget * float(cost[:, 2].sum())
    grid = np.rint(np.arange(0.0, 1.0 + step / 2, step) * n).astype(int)
    best: tuple[float, npt.NDArray[np.intp]] | None = None
    for large in grid:
        tiers = np.ones(n, dtype=np.intp)
        tiers[by_upper[:large]] = 2
        rest = by_score[tiers[by_score] == 1]
        gain = np.concatenate([[0.0], np.cumsum(correct[rest, 0] - correct[rest, 1])])
        saved = np.concatenate([[0.0], np.cumsum(cost[rest, 1] - cost[rest, 0])])
        base = float(correct[np.arange(n), tiers].sum())
        spent = float(cost[np.arange(n), tiers].sum())
        for small in grid[grid <= len(rest)]:
            if spent - saved[small] > limit + 1e-12:
                continue
            right = base + gain[small]
            if best is None or right > best[0] + 1e-12:
                chosen = tiers.copy()
                chosen[rest[:small]] = 0
                best = (float(right), chosen)
    if best is None:
        return TierMix(float("nan"), float("nan"), (float("nan"),) * 3)
    return tier_mix(best[1], correct, cost)


def three_tier_difference_ci(
    first: FloatArray,
    second: FloatArray,
    correct: FloatArray,
    cost: FloatArray,
    budget: float = 0.25,
    draws: int = 200,
    seed: int = 0,
) -> tuple[float, float]:
    """Paired bootstrap 95 % interval of the best-accuracy difference of two scores."""

    def difference(rows: IntArray) -> float:
        c, k = correct[rows], cost[rows]
        a = best_three_tier(first[rows], c, k, budget, seed, step=0.02).accuracy
        b = best_three_tier(second[rows], c, k, budget, seed, step=0.02).accuracy
        return a - b

    return paired_bootstrap(len(first), difference, draws, seed)


def random_three_tier(
    correct: FloatArray, cost: FloatArray, budget: float = 0.25, seed: int = 0, runs: int = 10
) -> TierMix:
    rng = np.random.default_rng(seed)
    mixes = [
        best_three_tier(rng.random(len(correct)), correct, cost, budget, seed + i)
        for i in range(runs)
    ]
    return TierMix(
        float(np.mean([m.accuracy for m in mixes])),
        float(np.mean([m.cost_share for m in mixes])),
        tuple(float(s) for s in np.mean([m.shares for m in mixes], axis=0)),
    )


@dataclass(frozen=True, slots=True)
class Calibration:
    ece: float  # expected calibration error, equal-width bins weighted by their size
    bins: tuple[tuple[float, float, int, float, float], ...]  # lo, hi, n, mean score, observed


def calibration(scores: FloatArray, outcomes: FloatArray, bins: int = 10) -> Calibration:
    """Reliability of ``scores`` as probabilities of ``outcomes`` (0/1 or fractional)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(scores, edges[1:-1]), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        inside = which == b
        if not inside.any():
            continue
        mean, seen = float(scores[inside].mean()), float(outcomes[inside].mean())
        ece += inside.mean() * abs(mean - seen)
        rows.append((float(edges[b]), float(edges[b + 1]), int(inside.sum()), mean, seen))
    return Calibration(float(ece), tuple(rows))
