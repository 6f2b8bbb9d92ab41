"""RouteLLM's router metrics over one benchmark's requests.

Sort requests by score and send the top fraction ``c`` to the strong model; q(c) is the
mean correctness of that mix. PGR(c) = (q(c) - q_weak) / (q_strong - q_weak);
APGR = trapezoid area of PGR over c at the 10 quantile cut points (0.1 … 1.0, plus c = 0);
CPT(x) = the smallest share of strong calls (on a 1 % grid) whose PGR reaches x.
Ties in a score (the length router has many) are broken at random, seeded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
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


def report(scores: FloatArray, weak: FloatArray, strong: FloatArray, seed: int = 0) -> RouterReport:
    pgr = pgr_curve(scores, weak, strong, QUANTILES, seed)
    fine = pgr_curve(scores, weak, strong, CPT_GRID, seed)

    def cpt(target: float) -> float:
        reached = np.nonzero(fine >= target - 1e-12)[0]
        return float(CPT_GRID[reached[0]]) if len(reached) else float("nan")

    apgr = float(np.sum((pgr[1:] + pgr[:-1]) / 2 * np.diff(QUANTILES)))
    return RouterReport(apgr, cpt(0.5), cpt(0.8), tuple(float(p) for p in pgr))


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
