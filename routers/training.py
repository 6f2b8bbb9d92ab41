"""Fit the complexity model: standardise, then L2 logistic regression per head.

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
from routers.datasets import Example
from routers.features import FEATURES, text_features

Array = npt.NDArray[np.float32]
MIN_LARGE_LABELS = 200


@dataclass(frozen=True, slots=True)
class TrainOptions:
    seed: int = 0
    c: float = 0.05  # inverse L2 strength, picked on the validation benchmarks
    feature_weight: float = 1.0
    group_effects: bool = True
    # Added to the standardised log-length weight: within a benchmark longer prompts are
    # harder, more than the pooled fit learns (picked on validation folds, docs/classifier.md).
    length_prior: float = 1.0


def feature_matrix(examples: Sequence[Example]) -> Array:
    return np.stack([text_features(e.messages, e.text) for e in examples]).astype(np.float32)


GROUP_SCALE = 10.0  # group indicators barely feel the L2 penalty


def _fit_head(
    x: Array, y: Array, w: Array, groups: Sequence[str], options: TrainOptions
) -> tuple[Array, float]:
    """Logistic regression with one free offset per group (benchmark).

    The offsets absorb how hard each benchmark is on average, so the shared weights
    learn what makes a request harder than its neighbours; they are dropped afterwards
    and replaced by their weighted mean."""
    from sklearn.linear_model import LogisticRegression

    names = sorted(set(groups))
    onehot = np.zeros((len(groups), len(names)), dtype=np.float32)
    onehot[np.arange(len(groups)), [names.index(g) for g in groups]] = GROUP_SCALE
    if not options.group_effects:
        onehot = onehot[:, :0]
    x = np.concatenate([x, onehot], axis=1)
    # Soft labels: each row counts as a positive with weight y and a negative with 1 - y.
    xs = np.concatenate([x, x])
    ys = np.concatenate([np.ones(len(y)), np.zeros(len(y))])
    ws = np.concatenate([w * y, w * (1.0 - y)])
    keep = ws > 0
    model = LogisticRegression(C=options.c, max_iter=3000, random_state=options.seed)
    model.fit(xs[keep], ys[keep], sample_weight=ws[keep])
    dim = x.shape[1] - onehot.shape[1]
    offsets = model.coef_[0][dim:] * GROUP_SCALE
    shared = float(np.average(offsets[onehot.argmax(1)], weights=w)) if len(offsets) else 0.0
    return model.coef_[0][:dim].astype(np.float32), float(model.intercept_[0]) + shared


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
    heads, coefs, intercepts = [HEAD_MORE], [], []
    y = np.array([examples[i].label for i in labelled], dtype=np.float64)
    w = np.array([examples[i].weight for i in labelled], dtype=np.float64)
    groups = [f"{examples[i].source}/{examples[i].benchmark}" for i in labelled]
    coef, intercept = _fit_head(
        z[labelled].astype(np.float32), y.astype(np.float32), w.astype(np.float32), groups, options
    )
    coef[vectors.shape[1] + FEATURES.index("log_chars_total")] += options.length_prior
    coefs.append(coef)
    intercepts.append(intercept)
    large = [i for i, e in enumerate(examples) if e.large is not None]
    if len(large) >= MIN_LARGE_LABELS:
        y_large = np.array([examples[i].large for i in large], dtype=np.float32)
        large_groups = [f"{examples[i].source}/{examples[i].benchmark}" for i in large]
        ones = np.ones(len(large), np.float32)
        coef, intercept = _fit_head(
            z[large].astype(np.float32), y_large, ones, large_groups, options
        )
        heads.append(HEAD_LARGE)
        coefs.append(coef)
        intercepts.append(intercept)
    return ComplexityModel(
        embedder=embedder,
        features=FEATURES,
        heads=tuple(heads),
        mean=mean.astype(np.float32),
        scale=scale.astype(np.float32),
        coef=np.stack(coefs).astype(np.float32),
        intercept=np.asarray(intercepts, dtype=np.float32),
        info={
            "seed": options.seed,
            "c": options.c,
            "length_prior": options.length_prior,
            "examples": len(labelled),
            **(info or {}),
        },
    )
