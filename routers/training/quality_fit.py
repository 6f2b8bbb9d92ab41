"""Fit the per-tier quality model: an item-response model over every label the pool holds.

Each labelled prompt ``i`` is an item, each scored model ``m`` a respondent. The model is

    P(m answers i acceptably) = sigmoid(v_m + u_m · h_i),   h_i = W z_i + c

with ``z_i`` the standardised ``[embedding, features]`` of the prompt: ``h_i`` is the
item's easiness (``dims`` numbers), read off the prompt, ``v_m`` the model's ability and
``u_m`` how strongly its success follows easiness (its discrimination). Fitting ``W``
over nine models' answers to the same prompt (LLMRouter rows), four (RouterBench) or two
(golden) uses every label at once: a difficulty that many models agree on is a far less
noisy target than one pair's win or loss. Observations are weighted ``1 / models**power``
per item, so an item scored by nine models counts more than one scored by two, but not
nine times more.

Calibration: the item function is refitted ``calibration_folds`` times with whole
benchmark families held out (model parameters fixed), and on those out-of-family logits a
per-model Platt map (``a + b · logit``) is fitted: predictions on a new kind of traffic
are only as sharp as the item function proved on families it had not seen. The result is
folded into one logistic head per model (``QualityModel``). Deterministic: L-BFGS from a
fixed start, no randomness.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from routers.features import FEATURES, message_text
from routers.quality import QualityModel
from routers.quality_regions import Observed, Regions, fit_regions
from routers.training.complexity_fit import family_folds, feature_matrix
from routers.training.datasets import Example, family

Array = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Ints = npt.NDArray[np.intp]

# The one ladder whose three rungs were scored on the same prompts, with costs
# (RouterBench): a 7B, a mixture-of-experts 47B and a frontier model.
LADDER = ("mistral-7b-instruct", "mixtral-8x7b-instruct", "gpt-4-1106-preview")
JUDGED = "anchors"  # the family of the hand-labelled anchors (data/routing/anchors.csv)
REFERENCE_STEP = 4


@dataclass(frozen=True, slots=True)
class QualityOptions:
    dims: int = 1  # easiness dimensions per item
    l2: float = 30.0  # penalty on the item function's weights (per observation weight)
    model_l2: float = 1e-4  # on the models' parameters (fixes the scale)
    power: float = 0.5  # an item's observations weigh 1 / models ** power each
    calibration_folds: int = 5  # benchmark-held-out folds for the Platt maps; 0: none
    ladder: tuple[str, ...] = LADDER
    anchor_weight: float | None = None  # an anchor's weight (None: the data's, 5)
    group_offsets: bool = False  # one easiness offset per benchmark while fitting
    # Subtracted from the fitted easiness per standardised log-length: inside a benchmark a
    # longer request is harder (the complexity model's length prior, chosen there by
    # leave-one-benchmark-out).
    length_prior: float = 1.0
    max_iter: int = 150
    # The regional signal check (routers/quality_regions.py): regions of the embedding
    # space, each recalibrated on its out-of-family logits; 0: none (the shipped model:
    # docs/classifier.md says why). The prior's precision (observation weight) pulls a
    # region towards the global calibration.
    regions: int = 0
    region_prior: float = 10.0


@dataclass(frozen=True, slots=True)
class Observations:
    item: Ints  # row of the item in the example list
    model: Ints  # index into ``models``
    y: F64  # correctness in [0, 1]
    weight: F64
    models: tuple[str, ...]


def _anchor_scores(label: float, ladder: Sequence[str]) -> dict[str, float]:
    if label >= 0.5:
        return {ladder[0]: 0.0, ladder[-1]: 1.0}
    return {m: 1.0 for m in ladder}


def observations(examples: Sequence[Example], options: QualityOptions) -> Observations:
    """One observation per (prompt, scored model). Anchors (judged, not measured) count as
    the ladder's cheapest model failing and its largest answering an expert task, and
    every ladder model answering a trivial one."""
    names: dict[str, int] = {m: i for i, m in enumerate(options.ladder)}
    items, models, ys, weights = [], [], [], []
    for row, example in enumerate(examples):
        scores = dict(example.scores or {})
        if example.source == "anchors" and example.label is not None:
            scores = _anchor_scores(example.label, options.ladder)
        if not scores:
            continue
        weight = example.weight
        if example.source == JUDGED and options.anchor_weight is not None:
            weight = options.anchor_weight
        each = weight / len(scores) ** options.power
        for name, score in sorted(scores.items()):
            items.append(row)
            models.append(names.setdefault(name, len(names)))
            ys.append(score)
            weights.append(each)
    return Observations(
        np.asarray(items, dtype=np.intp),
        np.asarray(models, dtype=np.intp),
        np.asarray(ys, dtype=np.float64),
        np.asarray(weights, dtype=np.float64),
        tuple(names),
    )


@dataclass(frozen=True, slots=True)
class ItemResponse:
    w: F64  # (dims, dim) item function
    c: F64  # (dims,)
    u: F64  # (models, dims) discrimination
    v: F64  # (models,) ability

    def logits(self, z: F64, models: Ints, items: Ints | None = None) -> F64:
        h = z @ self.w.T + self.c
        rows = h if items is None else h[items]
        out: F64 = self.v[models] + np.sum(self.u[models] * rows, axis=1)
        return out


def _length_column(dim: int) -> int:
    """The standardised ``log_chars_total`` column of ``[embedding, features]``."""
    return dim - len(FEATURES) + FEATURES.index("log_chars_total")


def _softplus(x: F64) -> F64:
    out: F64 = np.logaddexp(0.0, x)
    return out


def fit_item_response(
    z: F64,
    obs: Observations,
    options: QualityOptions,
    fixed: ItemResponse | None = None,
    groups: Ints | None = None,
) -> ItemResponse:
    """Maximum penalised likelihood by L-BFGS; ``fixed``: keep its model parameters and
    fit only the item function (the out-of-family refits). ``groups`` (per example row):
    one free easiness offset per group (benchmark) while fitting, replaced afterwards by
    their weighted mean, so ``W`` learns what makes a prompt harder than its neighbours."""
    from scipy.optimize import minimize
    from scipy.sparse import csr_matrix

    k, d, m = options.dims, z.shape[1], len(obs.models)
    total = float(obs.weight.sum())
    wt = obs.weight / total
    used, local = np.unique(obs.item, return_inverse=True)
    zu = np.ascontiguousarray(z[used], dtype=np.float32)
    # The length prior is added after fitting (as the complexity model's is): fitted with
    # it, the free weights would simply undo it.
    prior = np.zeros(d)
    prior[_length_column(d)] = -options.length_prior
    # item_sum @ per-observation values: their sum per item (the gradient's gather)
    item_sum = csr_matrix((np.ones(len(local)), (local, np.arange(len(local)))))
    group = (
        np.zeros(len(used), np.intp)
        if groups is None
        else np.unique(groups[used], return_inverse=True)[1]
    )
    n_groups = int(group.max()) + 1 if groups is not None else 0
    seen = np.maximum(np.bincount(obs.model, wt, m), 1e-12)
    y_mean = np.clip(np.bincount(obs.model, obs.y * wt, m) / seen, 0.02, 0.98)

    g_len = n_groups * k

    def offsets(theta: F64) -> F64:
        return theta[k * d + k : k * d + k + g_len].reshape(n_groups, k)

    def unpack(theta: F64) -> ItemResponse:
        w = theta[: k * d].reshape(k, d)
        c = theta[k * d : k * d + k]
        if fixed is not None:
            return ItemResponse(w, c, fixed.u, fixed.v)
        rest = theta[k * d + k + g_len :]
        return ItemResponse(w, c, rest[: m * k].reshape(m, k), rest[m * k :])

    def loss(theta: F64) -> tuple[float, F64]:
        p = unpack(theta)
        h = zu @ p.w.T + p.c
        if n_groups:
            h = h + offsets(theta)[group]
        rows = h[local]
        logit = p.v[obs.model] + np.sum(p.u[obs.model] * rows, axis=1)
        value = float(np.sum(wt * (_softplus(logit) - obs.y * logit)))
        value += 0.5 * options.l2 / total * float(np.sum(p.w**2))
        g = wt * (1.0 / (1.0 + np.exp(-logit)) - obs.y)
        dh = np.asarray(item_sum @ (g[:, None] * p.u[obs.model]))
        grad = [(dh.T @ zu + options.l2 / total * p.w).ravel(), dh.sum(axis=0)]
        if n_groups:
            grad.append(
                np.stack([np.bincount(group, dh[:, j], n_groups) for j in range(k)], 1).ravel()
            )
        if fixed is None:
            du = np.stack([np.bincount(obs.model, g * rows[:, j], m) for j in range(k)], axis=1)
            dv = np.bincount(obs.model, g, m)
            value += 0.5 * options.model_l2 * float(np.sum(p.u**2) + np.sum(p.v**2))
            grad += [(du + options.model_l2 * p.u).ravel(), dv + options.model_l2 * p.v]
        return value, np.concatenate(grad)

    if fixed is not None:  # warm start: the item function fitted on everything
        start = [(fixed.w - prior[None, :]).ravel(), fixed.c, np.zeros(g_len)]
    else:
        start = [np.zeros(k * d), np.zeros(k), np.zeros(g_len)]
        start += [np.full(m * k, 0.5), np.log(y_mean / (1 - y_mean))]
    result = minimize(
        loss,
        np.concatenate(start),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": options.max_iter, "ftol": 1e-10, "gtol": 1e-7},
    )
    theta = np.asarray(result.x, dtype=np.float64)
    fitted = unpack(theta)
    fitted = ItemResponse(fitted.w + prior[None, :], fitted.c, fitted.u, fitted.v)
    if not n_groups:
        return fitted
    per_item = np.bincount(local, obs.weight, len(used))
    level = np.average(offsets(theta)[group], axis=0, weights=per_item)
    return ItemResponse(fitted.w, fitted.c + level, fitted.u, fitted.v)


def _platt(logit: F64, y: F64, w: F64) -> tuple[float, float]:
    """``(a, b)`` of ``sigmoid(a + b · logit)`` fitted to ``y`` (weighted, slope ≥ 0)."""
    from scipy.optimize import minimize

    def loss(ab: F64) -> tuple[float, F64]:
        t = ab[0] + ab[1] * logit
        g = w * (1.0 / (1.0 + np.exp(-t)) - y)
        value = float(np.sum(w * (_softplus(t) - y * t))) + 1e-4 * float(ab @ ab)
        return value, np.array([g.sum(), g @ logit]) + 2e-4 * ab

    result = minimize(
        loss, np.array([0.0, 1.0]), jac=True, method="L-BFGS-B", bounds=[(None, None), (0, None)]
    )
    return float(result.x[0]), float(result.x[1])


def out_of_family_logits(
    z: F64,
    obs: Observations,
    families: Sequence[str],
    base: ItemResponse,
    options: QualityOptions,
    groups: Ints | None = None,
) -> F64:
    """Each observation's logit from an item function fitted without its family (the
    ``judged`` items, hand-labelled anchors, are never held out: NaN)."""
    out = np.full(len(obs.y), np.nan)
    used = np.unique(obs.item)
    measured = np.asarray([families[i] != JUDGED for i in used])
    used = used[measured]
    for fold in family_folds([families[i] for i in used], options.calibration_folds):
        held_items = used[fold]
        held = np.isin(obs.item, held_items)
        keep = ~held
        if not held.any() or not keep.any():
            continue
        rest = Observations(
            obs.item[keep], obs.model[keep], obs.y[keep], obs.weight[keep], obs.models
        )
        refit = fit_item_response(z, rest, options, fixed=base, groups=groups)
        out[held] = refit.logits(z, obs.model[held], obs.item[held])
    return out


def fit_quality(
    examples: Sequence[Example],
    vectors: Array,
    embedder: str,
    options: QualityOptions = QualityOptions(),
    info: Mapping[str, Any] | None = None,
) -> QualityModel:
    obs = observations(examples, options)
    if len(obs.y) == 0:
        raise ValueError("no scored examples")
    features = feature_matrix(examples)
    x = np.concatenate([vectors, features], axis=1).astype(np.float64)
    used = np.unique(obs.item)
    mean = x[used].mean(axis=0)
    scale = x[used].std(axis=0)
    scale[scale < 1e-6] = 1.0
    z = (x - mean) / scale
    names = [f"{e.source}/{e.benchmark}" for e in examples]
    groups = np.unique(names, return_inverse=True)[1] if options.group_offsets else None
    base = fit_item_response(z, obs, options, groups=groups)
    families = [family(e.benchmark) for e in examples]
    calibration = [(0.0, 1.0)] * len(obs.models)
    oof = np.full(len(obs.y), np.nan)
    if options.calibration_folds and len({families[i] for i in used}) >= 2:
        oof = out_of_family_logits(z, obs, families, base, options, groups)
        # calibrated on measured correctness only: the anchors are judgements
        calibration = [
            _platt(oof[rows], obs.y[rows], obs.weight[rows])
            for rows in ((obs.model == m) & ~np.isnan(oof) for m in range(len(obs.models)))
        ]
    w, c = base.w, base.c
    coef, intercept = [], []
    for m, (a, b) in enumerate(calibration):
        coef.append(b * (base.u[m] @ w))
        intercept.append(a + b * (base.v[m] + base.u[m] @ c))
    regions, region_info = _regions(
        vectors, z, used, obs, oof, (calibration, coef, intercept), families, options
    )
    # Reference traffic: every REFERENCE_STEP-th measured prompt, as the model predicts it
    # (what λ is read from until a deployment has pooled traffic of its own).
    measured = [i for i in used if families[i] != JUDGED][::REFERENCE_STEP]
    reference = z[measured] @ np.asarray(coef).T + np.asarray(intercept)
    reference_region = None if regions is None else regions.assign(vectors[measured])
    chars = [sum(len(message_text(m)) for m in examples[i].messages) for i in measured]
    return QualityModel(
        embedder=embedder,
        features=FEATURES,
        models=obs.models,
        ladder=tuple(options.ladder),
        mean=mean.astype(np.float32),
        scale=scale.astype(np.float32),
        coef=np.asarray(coef, dtype=np.float32),
        intercept=np.asarray(intercept, dtype=np.float32),
        reference_logits=np.asarray(reference, dtype=np.float32),
        reference_chars=np.asarray(chars, dtype=np.float32),
        info={
            "dims": options.dims,
            "l2": options.l2,
            "power": options.power,
            "length_prior": options.length_prior,
            "anchor_weight": options.anchor_weight,
            "group_offsets": options.group_offsets,
            "calibration_folds": options.calibration_folds,
            "observations": len(obs.y),
            "items": len(used),
            "platt": [list(ab) for ab in calibration],
            "regions": region_info,
            **dict(info or {}),
        },
        regions=regions,
        reference_region=reference_region,
    )


def _regions(
    vectors: Array,
    z: F64,
    used: Ints,
    obs: Observations,
    oof: F64,
    heads: tuple[Sequence[tuple[float, float]], Sequence[F64], Sequence[float]],
    families: Sequence[str],
    options: QualityOptions,
) -> tuple[Regions | None, list[dict[str, Any]]]:
    """The regional signal check on the calibrated out-of-family logits (none without
    regions or without out-of-family logits)."""
    if not options.regions or np.isnan(oof).all():
        return None, []
    calibration, coef, intercept = heads
    a = np.asarray([ab[0] for ab in calibration])
    b = np.asarray([ab[1] for ab in calibration])
    logits = z @ np.asarray(coef).T + np.asarray(intercept)
    observed = Observed(obs.item, obs.model, obs.y, obs.weight, a[obs.model] + b[obs.model] * oof)
    k = min(options.regions, len(used))
    vectors64 = np.asarray(vectors, dtype=np.float64)
    regions, fits = fit_regions(vectors64, used, logits, observed, k, options.region_prior)
    region = regions.assign(vectors[used])
    report = []
    for r, f in enumerate(fits):
        mine = Counter(families[i] for i in used[region == r]).most_common(3)
        report.append(
            {
                "items": f.items,
                "slope": round(f.slope, 3),
                "evidence": {
                    obs.models[m]: round(float(w), 1) for m, w in enumerate(f.evidence) if w > 0
                },
                "families": {name: n for name, n in mine},
            }
        )
    return regions, report
