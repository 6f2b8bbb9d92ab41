"""The refit: a correction learnt from the deployment's own labels, layered over any
``TierQuality``, and the time-split check that decides whether it serves.

Per tier, on the logit of the base model's prediction ``z``:

    z' = z + a·z + b + w·(U (v - c)) + f·standardised(features)

``U`` holds the ``directions`` principal directions of the labelled embeddings (where this
traffic varies), so the correction can tell the deployment's kinds of request apart. Each
tier's coefficients are a part shared by every tier plus the tier's own, fitted in one
L2-penalised logistic regression over all labels (``ridge`` on both; every coefficient 0
is the base model): what this traffic shifts for every tier moves a tier with few labels
too, and a tier with none gets the shared part alone (``shared=False``: each tier fitted
on its own labels, a tier without labels keeping the base).

The check splits the labels by time: the newest ``holdout`` share is never fitted on. The
refit serves only when its hold-out log-loss beats what serves now by ``margin``; a
serving refit that the base now beats is reverted to the base; otherwise the new refit
is rolled back (discarded).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from policies.stores.feedback import Decision, Label
from routers.tier_quality import Array, TierQuality

F64 = npt.NDArray[np.float64]
CLIP = 4.0  # logits beyond ±4 (P 0.018 / 0.982) carry no more information for a label
MIN_SPLIT = 10  # labels on each side of the time split, at least
NEWTON_STEPS = 25
MIN_FEATURE_SCALE = 0.01  # a text feature's spread below which it is not standardised


def base_logits(base: TierQuality, vectors: Array, features: Array) -> F64:
    """The base model's logits, clipped to ±``CLIP``."""
    return np.asarray(np.clip(base.logits(vectors, features), -CLIP, CLIP), dtype=np.float64)


def sigmoid(z: F64) -> F64:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -30, 30))), dtype=np.float64)


@dataclass(frozen=True)
class LabelSet:
    """Labels as arrays, oldest first; rows whose tier the model lacks are dropped."""

    vectors: Array  # (n, dim)
    features: Array  # (n, features)
    tier: npt.NDArray[np.intp]  # index into the model's tiers
    y: F64  # 1: acceptable
    cost: F64  # of the judged answer
    reference_cost: F64  # of the answer it was compared with (0: none, a client label)

    def __len__(self) -> int:
        return len(self.y)

    def rows(self, which: slice | npt.NDArray[np.intp]) -> LabelSet:
        return LabelSet(
            self.vectors[which],
            self.features[which],
            self.tier[which],
            self.y[which],
            self.cost[which],
            self.reference_cost[which],
        )


def label_set(labels: Sequence[Label], tiers: Sequence[str]) -> LabelSet:
    usable = [
        x for x in labels if x.vector is not None and x.features is not None and x.tier in tiers
    ]
    if not usable:
        nothing = np.zeros(0)
        empty = np.zeros((0, 0), np.float32)
        return LabelSet(empty, empty, np.zeros(0, np.intp), nothing, nothing, nothing)
    return LabelSet(
        np.stack([np.frombuffer(x.vector or b"", np.float16) for x in usable]).astype(np.float32),
        np.asarray([x.features for x in usable], np.float32),
        np.asarray([list(tiers).index(x.tier) for x in usable], np.intp),
        np.asarray([float(x.acceptable) for x in usable]),
        np.asarray([x.cost_usd for x in usable]),
        np.asarray([x.reference_cost_usd if x.reference_tier else 0.0 for x in usable]),
    )


@dataclass(frozen=True)
class Correction:
    tiers: tuple[str, ...]
    centre: Array  # (dim,)
    directions: Array  # (k, dim)
    feature_mean: Array
    feature_scale: Array
    coef: F64  # (tiers, 2 + k + features): on z, bias, directions, features
    fitted: tuple[int, ...]  # labels per tier it was fitted on

    def design(self, z: F64, vectors: Array, features: Array) -> F64:
        projected = (vectors - self.centre) @ self.directions.T
        scaled = (features - self.feature_mean) / self.feature_scale
        ones = np.ones((len(z), 1))
        return np.concatenate([z[:, None], ones, projected, scaled], axis=1, dtype=np.float64)

    def to_bytes(self) -> bytes:
        meta = {"tiers": list(self.tiers), "fitted": list(self.fitted)}
        out = io.BytesIO()
        np.savez_compressed(
            out,
            meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
            centre=self.centre,
            directions=self.directions,
            feature_mean=self.feature_mean,
            feature_scale=self.feature_scale,
            coef=self.coef,
        )
        return out.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Correction:
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            arrays = {k: np.asarray(data[k]) for k in data.files if k != "meta"}
        return cls(
            tiers=tuple(meta["tiers"]),
            centre=arrays["centre"].astype(np.float32),
            directions=arrays["directions"].astype(np.float32),
            feature_mean=arrays["feature_mean"].astype(np.float32),
            feature_scale=arrays["feature_scale"].astype(np.float32),
            coef=arrays["coef"].astype(np.float64),
            fitted=tuple(int(n) for n in meta["fitted"]),
        )


class RefittedQuality:
    """A ``TierQuality``: the base model's predictions with the correction applied."""

    def __init__(self, base: TierQuality, correction: Correction) -> None:
        if correction.tiers != base.tiers:
            raise ValueError(f"refit for tiers {correction.tiers}, model has {base.tiers}")
        self.base = base
        self.correction = correction
        self.tiers = base.tiers
        # z' = z·(1 + a) + U(v - c)·w + ((f - m) / s)·f' + b, per tier, as matrices
        c, k = correction, correction.directions.shape[0]
        on_directions, on_scaled = c.coef[:, 2 : 2 + k].T, c.coef[:, 2 + k :].T
        on_vectors = c.directions.T.astype(np.float64) @ on_directions  # (dim, tiers)
        on_features = on_scaled / c.feature_scale[:, None].astype(np.float64)
        bias = c.coef[:, 1] - c.centre @ on_vectors - c.feature_mean @ on_features
        # float32, as the request's vectors are: no conversion on the request path
        self._slope = (1.0 + c.coef[:, 0]).astype(np.float32)
        self._on_vectors = on_vectors.astype(np.float32)
        self._on_features = on_features.astype(np.float32)
        self._bias = bias.astype(np.float32)

    def logits(self, vectors: Array, features: Array) -> Array:
        # ``Correction.design`` for every tier at once, its linear part folded into two
        # matrices (routing pays this on every request a refit serves).
        z = np.clip(self.base.logits(vectors, features), -CLIP, CLIP)  # as ``base_logits``
        linear = vectors @ self._on_vectors + features @ self._on_features
        out: Array = np.asarray(z * self._slope + linear + self._bias, dtype=np.float32)
        return out

    def predict(self, vectors: Array, features: Array) -> Array:
        z = np.clip(self.logits(vectors, features), -30.0, 30.0)
        out: Array = np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float32)
        return out


@dataclass(frozen=True, slots=True)
class RefitOptions:
    directions: int = 8
    ridge: float = 100.0
    holdout: float = 0.25
    margin: float = 0.0
    shared: bool = True  # False: each tier fitted on its own labels alone (the first design)


def _objective(x: F64, y: F64, offset: F64, ridge: float, theta: F64) -> float:
    z = offset + x @ theta
    # log(1 + e^z) - y z, written to stay finite for large |z|
    loss = np.logaddexp(0.0, z) - y * z
    return float(loss.sum() + 0.5 * ridge * theta @ theta)


def _newton(x: F64, y: F64, offset: F64, ridge: float) -> F64:
    """L2-penalised logistic regression with a fixed offset (the base logit): Newton
    steps, each halved until the penalised loss goes down (a saturated offset makes a
    full step overshoot)."""
    theta = np.zeros(x.shape[1])
    penalty = ridge * np.eye(x.shape[1])
    current = _objective(x, y, offset, ridge, theta)
    for _ in range(NEWTON_STEPS):
        p = sigmoid(offset + x @ theta)
        gradient = x.T @ (p - y) + ridge * theta
        hessian = (x * (p * (1 - p))[:, None]).T @ x + penalty
        step = np.linalg.solve(hessian, gradient)
        for _ in range(30):
            trial = theta - step
            value = _objective(x, y, offset, ridge, trial)
            if value <= current:
                break
            step = step / 2
        else:
            return theta
        theta, improved, current = trial, current - value, value
        if improved < 1e-9 * max(abs(current), 1.0):
            break
    return theta


def fit_correction(base: TierQuality, train: LabelSet, options: RefitOptions) -> Correction:
    vectors, features = train.vectors, train.features
    centre = vectors.mean(axis=0)
    k = min(options.directions, max(len(train) - 1, 0), vectors.shape[1])
    directions = (
        np.linalg.svd(vectors - centre, full_matrices=False)[2][:k]
        if k
        else np.zeros((0, vectors.shape[1]))
    ).astype(np.float32)
    scale = features.std(axis=0)
    # A feature that hardly varies among the labels is left unscaled: its spread there is
    # the rounding of the recorded features (4 decimals), and dividing by it would turn the
    # serving request's unrounded value into a large, meaningless offset.
    scale = np.where(scale > MIN_FEATURE_SCALE, scale, 1.0)
    correction = Correction(
        base.tiers,
        centre.astype(np.float32),
        directions,
        features.mean(axis=0).astype(np.float32),
        scale.astype(np.float32),
        np.zeros((len(base.tiers), 2 + k + features.shape[1])),
        tuple(int((train.tier == t).sum()) for t in range(len(base.tiers))),
    )
    z = base_logits(base, vectors, features)[np.arange(len(train)), train.tier]
    x = correction.design(z, vectors, features)
    tiers, width = len(base.tiers), x.shape[1]
    if not options.shared:
        coef = correction.coef.copy()
        for t in range(tiers):
            mine = train.tier == t
            if mine.any():
                coef[t] = _newton(x[mine], train.y[mine], z[mine], options.ridge)
        return replace(correction, coef=coef)
    # One fit over every label: a correction shared by the tiers plus one per tier, both
    # pulled toward 0. What this traffic shifts for all tiers (harder than the base thinks,
    # a kind of request it misjudges) moves a tier with few labels too, so the tiers'
    # predictions stay comparable; a tier with none gets the shared part alone.
    blocks = np.zeros((len(train), width * (1 + tiers)))
    blocks[:, :width] = x
    for t in range(tiers):
        mine = train.tier == t
        blocks[mine, width * (1 + t) : width * (2 + t)] = x[mine]
    theta = _newton(blocks, train.y, z, options.ridge)
    coef = theta[:width][None, :] + theta[width:].reshape(tiers, width)
    return replace(correction, coef=coef)


def judged(model: TierQuality, labels: LabelSet) -> F64:
    """The model's P(acceptable) of each label's tier."""
    p = model.predict(labels.vectors, labels.features)
    return np.asarray(p[np.arange(len(labels)), labels.tier], dtype=np.float64)


def scores(p: F64, labels: LabelSet) -> dict[str, float]:
    """Log-loss and accuracy (at 0.5) on ``labels``; on the judge's pairs, the policy
    "the cheaper answer when P ≥ 0.5, else the reference": accuracy (a reference answer
    counts as acceptable) and cost as a share of always the reference."""
    q = np.clip(p, 1e-6, 1 - 1e-6)
    y = labels.y
    out = {
        "loss": float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q))),
        "accuracy": float(np.mean((p >= 0.5) == (y >= 0.5))),
    }
    pairs = labels.reference_cost > 0
    if pairs.any():
        cheap = p[pairs] >= 0.5
        out["pairs_accuracy"] = float(np.mean(np.where(cheap, y[pairs], 1.0)))
        spent = np.where(cheap, labels.cost[pairs], labels.reference_cost[pairs]).sum()
        out["pairs_cost"] = float(spent / labels.reference_cost[pairs].sum())
    return out


@dataclass(frozen=True)
class RefitResult:
    decision: Decision
    reason: str
    trained: int
    held_out: int
    metrics: dict[str, float]
    correction: Correction | None  # the new refit (whatever was decided)


def check_refit(
    base: TierQuality,
    serving: Correction | None,
    labels: LabelSet,
    options: RefitOptions,
) -> RefitResult | None:
    """Fit on the older labels, judge on the newest; None: too few labels to split."""
    n_hold = round(len(labels) * options.holdout)
    if n_hold < MIN_SPLIT or len(labels) - n_hold < MIN_SPLIT:
        return None
    train, hold = labels.rows(slice(0, len(labels) - n_hold)), labels.rows(slice(-n_hold, None))
    fresh = fit_correction(base, train, options)
    candidates: dict[str, TierQuality] = {"base": base, "refit": RefittedQuality(base, fresh)}
    if serving is not None:
        candidates["serving"] = RefittedQuality(base, serving)
    metrics = {
        f"{what}_{name}": value
        for name, model in candidates.items()
        for what, value in scores(judged(model, hold), hold).items()
    }
    current = "serving" if serving is not None else "base"
    now, new = metrics[f"loss_{current}"], metrics["loss_refit"]
    if new < now - options.margin:
        decision: Decision = "accepted"
        reason = f"hold-out log-loss {new:.4f} < {now:.4f} ({current})"
    elif serving is not None and metrics["loss_base"] < now - options.margin:
        decision = "reverted"
        reason = f"the base ({metrics['loss_base']:.4f}) beats the serving refit ({now:.4f})"
    else:
        decision = "rolled_back"
        reason = f"hold-out log-loss {new:.4f} >= {now:.4f} ({current}): not better"
    return RefitResult(decision, reason, len(train), len(hold), metrics, fresh)
