"""Score labelled pairs the way the cache decides, and calibrate the verifier on them.

``score_verifier_pairs`` gives each pair its cosine (the shared MiniLM), the rules'
verdict and, when the rules leave it undecided, the learned verifier's probability.
``decide`` then replays the cache's decision for a cosine threshold and a verifier
threshold. ``calibrate`` turns ``max_wrong_rate`` bounds into verifier thresholds on
the calibration part only (``routers.training.verifier_pairs``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from routers.embedding import Embedder
from routers.training.verifier_pairs import LabelledPair
from routers.verifier.model import CalibrationPoint
from routers.verifier.rules import Verdict, rule_verdict

# Candidates below this cosine never reach the verifier in calibration: a tenant's
# semantic_threshold is at least this (policies/schema.py).
CALIBRATION_COSINE = 0.5
RATES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
Scorer = Callable[[Sequence[tuple[str, str]]], list[float]]


@dataclass(frozen=True, slots=True)
class VerifiedPair:
    pair: LabelledPair
    cosine: float
    verdict: Verdict
    reason: str | None
    probability: float | None  # only for undecided pairs

    def hit(self, cosine_threshold: float, threshold: float | None) -> bool:
        """Whether the cache serves ``b`` from ``a``; ``threshold`` None: rules only."""
        if self.cosine < cosine_threshold or self.verdict == "different":
            return False
        if self.verdict == "same":
            return True
        return threshold is not None and (self.probability or 0.0) >= threshold


async def score_verifier_pairs(
    embedder: Embedder, scorer: Scorer | None, pairs: Sequence[LabelledPair], batch: int = 1
) -> list[VerifiedPair]:
    """``batch``: undecided pairs per model run; 1, as the cache runs it (one pair per
    lookup). The int8 model quantises its activations over the whole batch, so a pair
    scored among 63 others moves by a median 0.006 and up to 0.12 (issue 28): a
    threshold calibrated in batches of 64 was not the threshold served."""
    a = await embedder.embed([p.a for p in pairs])
    b = await embedder.embed([p.b for p in pairs])
    cosines = np.sum(a * b, axis=1)
    verdicts = [rule_verdict(p.a, p.b) for p in pairs]
    undecided = [i for i, (v, _) in enumerate(verdicts) if v == "undecided"]
    probabilities: dict[int, float] = {}
    if scorer is not None:
        for start in range(0, len(undecided), batch):
            rows = undecided[start : start + batch]
            for i, p in zip(rows, scorer([(pairs[i].a, pairs[i].b) for i in rows]), strict=True):
                probabilities[i] = p
    return [
        VerifiedPair(pair, float(c), v, reason, probabilities.get(i))
        for i, (pair, c, (v, reason)) in enumerate(zip(pairs, cosines, verdicts, strict=True))
    ]


def upper_bound(wrong: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate seen as ``wrong`` of ``n``."""
    if n == 0:
        return 1.0
    if wrong >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(confidence, wrong + 1, n - wrong))


def calibrate(
    scored: Sequence[VerifiedPair], rates: Sequence[float] = RATES
) -> list[CalibrationPoint]:
    """Per bound: the lowest verifier threshold at which the share of calibration
    near-misses reaching the verifier (cosine >= CALIBRATION_COSINE, undecided by the
    rules) that it accepts is within the bound. A bound finer than 1 / the number of
    such near-misses allows none of them: its threshold is above every one (observed
    rate 0; its 95 % upper bound, recorded beside it, says how little that proves)."""
    reach = [p for p in scored if p.verdict == "undecided" and p.cosine >= CALIBRATION_COSINE]
    negatives = sorted((p.probability or 0.0 for p in reach if not p.pair.match), reverse=True)
    positives = [p.probability or 0.0 for p in reach if p.pair.match]
    points = []
    if not negatives:
        return []
    for rate in rates:
        allowed = math.floor(rate * len(negatives))  # near-misses that may pass
        # The threshold sits just above the (allowed+1)-th highest near-miss score.
        threshold = min(math.nextafter(negatives[min(allowed, len(negatives) - 1)], 2.0), 1.0)
        recall = sum(1 for p in positives if p >= threshold) / max(len(positives), 1)
        wrong = sum(1 for p in negatives if p >= threshold)
        points.append(CalibrationPoint(rate, threshold, len(negatives), recall, wrong))
    return points
