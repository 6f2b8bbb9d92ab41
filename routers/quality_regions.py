"""Regional signal check: where the quality model has no evidence, no ranking.

The per-model Platt maps of ``routers/training/quality_fit.py`` say, for the training pool as
a whole, how sharp the item function is on benchmark families it never saw. That hides
regions of traffic where a tier's model was never observed at all: RouterBench's three
models answered only ARC-Challenge (and two of them the golden MMLU/GSM8K), so what the
model says about *their* relative quality on code or on commonsense riddles is the item
function's extrapolation, not evidence. There the policy would spend on the noise of its
predictions — send some requests of a region down and some up by differences nobody
measured — and can land below the fixed tiers.

So the embedding space of the training prompts is cut into ``k`` regions (spherical
k-means, deterministic), and per region the calibrated out-of-family logits (each family
predicted by an item function fitted without it, as for the global calibration) are
recalibrated:

    logit' = c_rm + slope_r * (logit - c_rm) + delta_rm

``c_rm`` is model m's mean logit over the region's training prompts, ``slope_r`` the
region's slope (shared by every model: the ranking is the item function's), ``delta_rm``
the region's level correction for model m (0 where m was never observed there). Both are
shrunk towards the identity by a Gaussian prior of precision ``prior``.

The guard: a region keeps its recalibration for a set of tiers only if **every** tier's
model has at least ``prior`` observation weight of out-of-family evidence there (the data
outweigh the prior). Elsewhere each tier's prediction is its region mean under the global
calibration (slope 0, no level correction): every request in the region sees the same
trade-off, and the objective sends them all to one tier instead of gambling on
differences no label supports. (A level correction for the observed tiers only would skew
the gaps between tiers, which are what the policy trades on.) Decided on training data
only: the regions, slopes, levels and evidence come from the training pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Ints = npt.NDArray[np.intp]


@dataclass(frozen=True)
class Regions:
    """Per region: slope, per-model centre and level correction, and the evidence."""

    centroids: Array  # (k, embedding dim), unit rows
    slope: Array  # (k,)
    centre: Array  # (k, models)
    delta: Array  # (k, models)
    evidence: Array  # (k, models) out-of-family observation weight
    min_evidence: float  # below it for any of the tiers' models: slope 0 in that region

    def assign(self, vectors: Array) -> Ints:
        """The nearest centroid by cosine (the vectors need not be normalised)."""
        region: Ints = np.argmax(np.asarray(vectors, np.float32) @ self.centroids.T, axis=1)
        return region

    def known(self, rows: Sequence[int]) -> npt.NDArray[np.bool_]:
        """Per region: whether every one of the heads ``rows`` has evidence there."""
        known: npt.NDArray[np.bool_] = np.all(
            self.evidence[:, list(rows)] >= self.min_evidence, axis=1
        )
        return known

    def apply(self, logits: Array, region: Ints, rows: Sequence[int]) -> Array:
        """Recalibrate ``logits`` (n, len(rows)), whose columns are the heads ``rows``, of
        prompts in ``region`` (n,)."""
        picked = list(rows)
        known = self.known(picked)
        # Unknown for these tiers: neither the region's ranking nor its level corrections,
        # which exist only for the models observed there and would skew the gaps between
        # tiers (the policy's trade-off) by correcting some tiers and not others.
        slope = np.where(known, self.slope, 0.0)[region][:, None]
        delta = np.where(known[:, None], self.delta[:, picked], 0.0)[region]
        centre = self.centre[region][:, picked]
        out: Array = (centre + slope * (logits - centre) + delta).astype(np.float32)
        return out


def unit(vectors: npt.ArrayLike) -> F64:
    x = np.asarray(vectors, dtype=np.float64)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    out: F64 = x / np.maximum(norm, 1e-12)
    return out


def spherical_kmeans(vectors: npt.ArrayLike, k: int, iterations: int = 50) -> F64:
    """``k`` unit centroids by cosine k-means; k-means++ start from a fixed seed."""
    x = unit(vectors)
    rng = np.random.default_rng(0)
    centroids = [x[int(rng.integers(len(x)))]]
    for _ in range(1, k):
        distance = 1.0 - np.max(x @ np.asarray(centroids).T, axis=1)
        p = np.maximum(distance, 0.0)
        centroids.append(x[int(rng.choice(len(x), p=p / p.sum()))])
    c = np.asarray(centroids)
    for _ in range(iterations):
        assign = np.argmax(x @ c.T, axis=1)
        moved = np.zeros_like(c)
        np.add.at(moved, assign, x)
        empty = np.linalg.norm(moved, axis=1) < 1e-12
        moved[empty] = c[empty]
        new = unit(moved)
        if np.allclose(new, c):
            break
        c = new
    return c


@dataclass(frozen=True, slots=True)
class RegionFit:
    """One region's recalibration, as fitted."""

    slope: float
    delta: F64  # (models,) level correction, 0 where the region has no observation
    centre: F64  # (models,) the region's mean calibrated logit per model
    items: int  # training prompts in the region

    evidence: F64  # (models,) observation weight per model


def fit_region(
    logit: F64,
    y: F64,
    weight: F64,
    model: Ints,
    centre: F64,
    prior: float,
) -> tuple[float, F64]:
    """``(slope, delta)`` of one region from its observations' out-of-family logits;
    ``centre`` (models,) the region's mean logit per model; ``prior`` the precision of the
    Gaussian prior towards slope 1, delta 0 (in units of observation weight)."""
    from scipy.optimize import minimize

    m = len(centre)
    if len(y) == 0:
        return 1.0, np.zeros(m)
    c = centre[model]
    deviation = logit - c

    def loss(theta: F64) -> tuple[float, F64]:
        beta, delta = theta[0], theta[1:]
        t = c + beta * deviation + delta[model]
        g = weight * (1.0 / (1.0 + np.exp(-t)) - y)
        value = float(np.sum(weight * (np.logaddexp(0.0, t) - y * t)))
        value += 0.5 * prior * float((beta - 1.0) ** 2 + delta @ delta)
        grad = np.concatenate(
            [[g @ deviation + prior * (beta - 1.0)], np.bincount(model, g, m) + prior * delta]
        )
        return value, grad

    start = np.concatenate([[1.0], np.zeros(m)])
    bounds = [(0.0, None)] + [(None, None)] * m
    result = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
    theta = np.asarray(result.x, dtype=np.float64)
    seen = np.bincount(model, minlength=m) > 0
    return float(theta[0]), np.where(seen, theta[1:], 0.0)


@dataclass(frozen=True, slots=True)
class Observed:
    """The calibration's observations: item row, model, correctness, weight, and the
    calibrated out-of-family logit (NaN where there is none: the judged anchors)."""

    item: Ints
    model: Ints
    y: F64
    weight: F64
    oof: F64


def fit_regions(
    vectors: F64, items: Ints, logits: F64, observed: Observed, k: int, prior: float
) -> tuple[Regions, list[RegionFit]]:
    """Regions over the training prompts ``items`` (rows of ``vectors``) and each
    region's recalibration; ``logits`` (rows of vectors, models): the calibrated
    full-model logits, whose per-region mean is the region's centre."""
    centroids = spherical_kmeans(vectors[items], k)
    region = np.argmax(unit(vectors) @ centroids.T, axis=1)
    fits = []
    for r in range(len(centroids)):
        mine = items[region[items] == r]
        centre = logits[mine].mean(axis=0) if len(mine) else np.zeros(logits.shape[1])
        keep = (region[observed.item] == r) & ~np.isnan(observed.oof)
        beta, delta = fit_region(
            observed.oof[keep],
            observed.y[keep],
            observed.weight[keep],
            observed.model[keep],
            centre,
            prior,
        )
        weight = np.bincount(observed.model[keep], observed.weight[keep], logits.shape[1])
        evidence: F64 = np.asarray(weight, dtype=np.float64)
        fits.append(RegionFit(beta, delta, centre, len(mine), evidence))
    regions = Regions(
        centroids.astype(np.float32),
        np.asarray([f.slope for f in fits], dtype=np.float32),
        np.asarray([f.centre for f in fits], dtype=np.float32),
        np.asarray([f.delta for f in fits], dtype=np.float32),
        np.asarray([f.evidence for f in fits], dtype=np.float32),
        float(prior),
    )
    return regions, fits
