"""Fit the complexity model: standardise, two logistic rankers, one calibrated head.

1. A *within* ranker: logistic regression with one free offset per benchmark, so it learns
   what makes a request harder than its neighbours (the offsets, dropped afterwards, absorb
   how hard each benchmark is on average). Its target is the share of the pool's models
   that failed the request where the pool scored several, else the 0/1 label.
2. A *level* ranker: the same without offsets, so it learns which kinds of request are hard.
3. Stacking + calibration: both rankers are refitted with whole benchmarks held out
   (``calibration_folds`` groups); on those out-of-family logits a two-feature logistic
   regression predicts the label (the cheapest tier failed). The final head is that
   combination, folded back into one weight vector: the score is a probability, and the
   served model is still one dot product.

Deterministic for a seed: the data order is fixed, lbfgs has no randomness, and the seed
only reaches sklearn's ``random_state``. The result is plain arrays (``ComplexityModel``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from routers.classifier import HEAD_LARGE, HEAD_MORE, ComplexityModel
from routers.features import FEATURES, text_features
from routers.training.datasets import Example, family

Array = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
MIN_LARGE_LABELS = 200
GROUP_SCALE = 10.0  # group indicators barely feel the L2 penalty


@dataclass(frozen=True, slots=True)
class TrainOptions:
    seed: int = 0
    c: float = 0.05  # inverse L2 strength, picked on the validation benchmarks
    feature_weight: float = 1.0
    group_effects: bool = True
    # Added to the standardised log-length weight of the within ranker: inside a benchmark
    # longer prompts are harder, more than the pooled fit learns (docs/classifier.md).
    length_prior: float = 1.0
    soft_target: bool = False  # rank on the pool's multi-model failure share
    level_head: bool = True  # stack the no-offset ranker beside the within ranker
    calibration_folds: int = 5  # benchmark-held-out folds for stacking; 0: uncalibrated
    length_stack: bool = False  # let the stacking pick the weight of plain log-length
    # Further plain features the stacking weighs (within benchmarks), e.g. the domain
    # lengths of ``features.DOMAIN_LENGTHS``: log-length inside code, inside multiple choice.
    stack_features: tuple[str, ...] = ()
    golden_weight: float = 1.0  # row weight of the golden sample (the evaluation's models)
    # Also fit P(needs large) on the golden rows: their weak model (Mixtral-8x7B) is the
    # three-tier set's medium tier and their strong one (GPT-4-1106) its large tier.
    golden_large: bool = False


def feature_matrix(examples: Sequence[Example]) -> Array:
    return np.stack([text_features(e.messages, e.text) for e in examples]).astype(np.float32)


def _fit_head(
    x: F64, y: F64, w: F64, groups: Sequence[str], c: float, seed: int, offsets: bool
) -> tuple[F64, float]:
    """Weighted logistic regression on soft labels ``y``, optionally one offset per group."""
    from sklearn.linear_model import LogisticRegression

    names = sorted(set(groups))
    onehot = np.zeros((len(groups), len(names) if offsets else 0))
    if offsets:
        onehot[np.arange(len(groups)), [names.index(g) for g in groups]] = GROUP_SCALE
    xg = np.concatenate([x, onehot], axis=1)
    # Soft labels: each row counts as a positive with weight y and a negative with 1 - y.
    xs = np.concatenate([xg, xg])
    ys = np.concatenate([np.ones(len(y)), np.zeros(len(y))])
    ws = np.concatenate([w * y, w * (1.0 - y)])
    keep = ws > 0
    model = LogisticRegression(C=c, max_iter=3000, random_state=seed)
    model.fit(xs[keep], ys[keep], sample_weight=ws[keep])
    dim = x.shape[1]
    offset = model.coef_[0][dim:] * GROUP_SCALE
    shared = float(np.average(offset[onehot.argmax(1)], weights=w)) if offsets else 0.0
    return np.asarray(model.coef_[0][:dim], dtype=np.float64), float(model.intercept_[0]) + shared


@dataclass(frozen=True, slots=True)
class _Data:
    z: F64  # standardised inputs
    rank_target: F64
    label: F64
    weight: F64
    groups: list[str]  # offsets: source/benchmark
    families: list[str]  # held out together: the benchmark across sources


def _rankers(data: _Data, rows: npt.NDArray[np.intp], options: TrainOptions) -> list[F64]:
    """Weight vectors (with the intercept last) of the within and, optionally, level rankers."""
    heads = []
    kinds = [options.group_effects] + ([False] if options.level_head else [])
    for offsets in kinds:
        coef, intercept = _fit_head(
            data.z[rows],
            data.rank_target[rows],
            data.weight[rows],
            [data.groups[i] for i in rows],
            options.c,
            options.seed,
            offsets,
        )
        if offsets:
            coef[-len(FEATURES) + FEATURES.index("log_chars_total")] += options.length_prior
        heads.append(np.append(coef, intercept))
    return heads


def _logits(z: F64, heads: Sequence[F64]) -> F64:
    return np.stack([z @ h[:-1] + h[-1] for h in heads], axis=1)


def family_folds(families: Sequence[str], folds: int) -> list[npt.NDArray[np.intp]]:
    """Whole families dealt round-robin, largest first, into ``folds`` groups of rows."""
    names, counts = np.unique(np.asarray(families), return_counts=True)
    ranked = [str(n) for n in names[np.lexsort((names, -counts))]]
    member = {name: i % folds for i, name in enumerate(ranked)}
    which = np.array([member[f] for f in families])
    return [np.nonzero(which == k)[0] for k in range(folds) if (which == k).any()]


def _stack(data: _Data, heads: Sequence[F64], options: TrainOptions) -> F64:
    """Out-of-family logits → one weight vector (intercept last) whose logistic is P(label).

    Stage A (ranking, with benchmark offsets): how much of each ranker, and of plain
    log-length, to trust on a benchmark never seen. Stage B (calibration): a logistic map
    of that ranking onto the label, fitted on the same out-of-family predictions, so it
    keeps the order within a benchmark and only sets the scale."""
    from sklearn.linear_model import LogisticRegression

    everything = np.arange(len(data.label))
    oof = np.zeros((len(data.label), len(heads)))
    for held in family_folds(data.families, options.calibration_folds):
        rest = np.setdiff1d(everything, held)
        oof[held] = _logits(data.z[held], _rankers(data, rest, options))
    dim = data.z.shape[1]
    parts = list(heads)
    for name in _stacked_features(options):
        column = np.zeros(dim + 1)
        column[dim - len(FEATURES) + FEATURES.index(name)] = 1.0
        parts.append(column)
        oof = np.concatenate([oof, (data.z @ column[:-1])[:, None]], axis=1)
    mix = np.ones(1)
    if len(parts) > 1:
        mix, _ = _fit_head(
            oof, data.rank_target, data.weight, data.groups, 100.0, options.seed, True
        )
    rank = oof @ mix
    y = data.label
    xs = np.concatenate([rank, rank])[:, None]
    ys = np.concatenate([np.ones(len(y)), np.zeros(len(y))])
    ws = np.concatenate([data.weight * y, data.weight * (1.0 - y)])
    keep = ws > 0
    platt = LogisticRegression(C=100.0, max_iter=1000, random_state=options.seed)
    platt.fit(xs[keep], ys[keep], sample_weight=ws[keep])
    if platt.coef_[0][0] <= 0:
        # Pooled, the ranking would be read backwards (benchmarks differ more than their
        # rows): keep the order, take the slope within benchmarks instead.
        slope, _ = _fit_head(rank[:, None], y, data.weight, data.groups, 100.0, options.seed, True)
        platt.coef_[0][0] = max(float(slope[0]), 1e-3)
        platt.intercept_[0] = _intercept(rank * platt.coef_[0][0], y, data.weight)
    combined = platt.coef_[0][0] * sum(
        (m * h for m, h in zip(mix, parts, strict=True)), np.zeros(dim + 1)
    )
    combined[-1] += platt.intercept_[0]
    return np.asarray(combined, dtype=np.float64)


def _stacked_features(options: TrainOptions) -> list[str]:
    """Plain features the stacking weighs beside the rankers (within benchmarks)."""
    names = ["log_chars_total"] if options.length_stack else []
    unknown = set(options.stack_features) - set(FEATURES)
    if unknown:
        raise ValueError(f"stack_features: unknown features {sorted(unknown)}")
    return names + [n for n in options.stack_features if n not in names]


def _intercept(logit: F64, y: F64, w: F64) -> float:
    """The offset that makes ``sigmoid(logit + b)`` match the weighted label mean (bisection)."""
    lo, hi = -30.0, 30.0
    target = float(np.average(y, weights=w))
    for _ in range(60):
        mid = (lo + hi) / 2
        mean = float(np.average(1 / (1 + np.exp(-(logit + mid))), weights=w))
        lo, hi = (mid, hi) if mean < target else (lo, mid)
    return (lo + hi) / 2


def _large_label(example: Example, options: TrainOptions) -> float | None:
    """P(needs large): the three-tier rows' own label; with ``golden_large`` also the
    golden rows' "Mixtral wrong, GPT-4 right" (the same as their ``label``)."""
    if example.large is not None or not (options.golden_large and example.source == "golden"):
        return example.large
    return example.label


def fit(
    examples: Sequence[Example],
    vectors: Array,
    embedder: str,
    options: TrainOptions = TrainOptions(),
    info: dict[str, Any] | None = None,
) -> ComplexityModel:
    labelled = [i for i, e in enumerate(examples) if e.label is not None]
    if not labelled:
        raise ValueError("no labelled examples")
    features = feature_matrix(examples)
    x = np.concatenate([vectors, features], axis=1).astype(np.float64)
    mean = x[labelled].mean(axis=0)
    scale = x[labelled].std(axis=0)
    scale[scale < 1e-6] = 1.0
    # Shrink the text features' standardised range relative to the embedding's.
    scale[vectors.shape[1] :] /= options.feature_weight
    z = (x - mean) / scale
    chosen = [examples[i] for i in labelled]
    label = np.array([e.label for e in chosen], dtype=np.float64)
    target = np.array(
        [
            e.difficulty if options.soft_target and e.difficulty is not None else e.label
            for e in chosen
        ],
        dtype=np.float64,
    )
    data = _Data(
        z[labelled],
        target,
        label,
        np.array(
            [e.weight * (options.golden_weight if e.source == "golden" else 1.0) for e in chosen],
            dtype=np.float64,
        ),
        [f"{e.source}/{e.benchmark}" for e in chosen],
        [family(e.benchmark) for e in chosen],
    )
    rows = np.arange(len(chosen))
    heads = _rankers(data, rows, options)
    families = len(set(data.families))
    combined = heads[0]
    if options.calibration_folds and families >= 2:
        combined = _stack(data, heads, options)
    coefs = [combined[:-1]]
    intercepts = [float(combined[-1])]
    out_heads = [HEAD_MORE]
    large_labels = [_large_label(e, options) for e in examples]
    large = [i for i, y in enumerate(large_labels) if y is not None]
    if len(large) >= MIN_LARGE_LABELS:
        y_large = np.array([large_labels[i] for i in large], dtype=np.float64)
        coef, intercept = _fit_head(
            z[large],
            y_large,
            np.ones(len(large)),
            [f"{examples[i].source}/{examples[i].benchmark}" for i in large],
            options.c,
            options.seed,
            options.group_effects,
        )
        out_heads.append(HEAD_LARGE)
        coefs.append(coef)
        intercepts.append(intercept)
    return ComplexityModel(
        embedder=embedder,
        features=FEATURES,
        heads=tuple(out_heads),
        mean=mean.astype(np.float32),
        scale=scale.astype(np.float32),
        coef=np.stack(coefs).astype(np.float32),
        intercept=np.asarray(intercepts, dtype=np.float32),
        info={
            "seed": options.seed,
            "c": options.c,
            "length_prior": options.length_prior,
            "soft_target": options.soft_target,
            "level_head": options.level_head,
            "calibration_folds": options.calibration_folds,
            "length_stack": options.length_stack,
            "stack_features": list(options.stack_features),
            "golden_weight": options.golden_weight,
            "golden_large": options.golden_large,
            "examples": len(labelled),
            **(info or {}),
        },
    )
