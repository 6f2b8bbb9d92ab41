"""Per-tier quality heads for the embedded tiers, fitted on their own answers to the FIT set.

The shipped quality model (``routers/quality.py``) is an item-response model with one
easiness dimension: every head's logit is ``a_m + b_m · h(x)``, ``h(x)`` the same direction
through the standardised ``[embedding, features]`` for all its models. This adds one head
per embedded tier on that item function, fitted on the tier's graded FIT answers:
``P(tier answers x acceptably) = sigmoid(A + B · h(x))``, two numbers per tier, ``B ≥ 0``
(a prompt easier for every model the pool scored is not harder for this one). The models
already in the file keep their heads byte for byte, so everything routed by them routes as
before; ``config/gateway.yaml`` names the new heads per tier (``routing.objective.reference``).
Only FIT prompts every tier answered are used; the held-out set is never read here.

Usage: ``python -m bench.live.quality`` (after ``bench.live.grade --set fit``) writes
``bench/live/data/fit-scores.jsonl`` and adds the heads to ``routers/model/quality.npz``;
``--config config/examples/static-embedder.yaml`` to the static embedder's model.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.live.analyse import REPO, TIERS, records
from bench.live.sets import load
from gateway.settings import load_effective_config
from policies.routing_spec import ClassifierConfig
from routers.embedders import build_embedder, shipped_model
from routers.features import text_features
from routers.quality import SHIPPED_QUALITY, QualityModel
from routers.training.batch import cached_embed, embedding_cache_path
from routers.training.datasets import load_operator

HERE = Path(__file__).resolve().parent
SCORES = HERE / "data" / "fit-scores.jsonl"
F64 = npt.NDArray[np.float64]


def rows() -> list[dict[str, object]]:
    items = {item["id"]: item for item in load("fit")}
    recs = records(HERE / "records", "fit")
    grades = json.loads((HERE / "grades" / "fit.json").read_text())
    out: list[dict[str, object]] = []
    for ident, item in items.items():
        answered = recs.get(ident, {})
        graded = grades.get(ident, {})
        if not set(TIERS) <= set(answered) & set(graded):
            continue
        if any("model" not in answered[t] for t in TIERS):  # a failed request: no label
            continue
        out.append(
            {
                "id": ident,
                "prompt": item["prompt"],
                "scores": {answered[t]["model"]: graded[t] for t in TIERS},
                "label": 1 - graded["small"],
                "group": f"live-{item['kind']}",
            }
        )
    return out


def easiness_direction(model: QualityModel) -> F64:
    """The unit direction every head's coefficients lie along (one easiness dimension)."""
    coef = model.coef.astype(np.float64)
    norms = np.linalg.norm(coef, axis=1)
    direction: F64 = coef[int(np.argmax(norms))] / norms.max()
    along = np.abs(coef @ direction)
    if not np.allclose(along, norms, rtol=1e-4, atol=1e-6):
        raise ValueError("the quality model's heads do not share one easiness direction")
    return direction


def fit_head(h: F64, y: F64, l2: float = 1e-3) -> tuple[float, float]:
    """``(A, B)`` of ``sigmoid(A + B·h)`` by Newton's method on the log-likelihood (a tiny
    ridge keeps it finite on separable labels); ``B`` clipped at 0."""
    x = np.stack([np.ones_like(h), h], axis=1)
    w = np.zeros(2)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (y - p) - l2 * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        w += step
        if np.abs(step).max() < 1e-10:
            break
    if w[1] < 0:  # a flat head: the tier's rate
        rate = float(np.clip(y.mean(), 1e-3, 1 - 1e-3))
        return float(np.log(rate / (1 - rate))), 0.0
    return float(w[0]), float(w[1])


def with_heads(model: QualityModel, config: ClassifierConfig) -> QualityModel:
    """``model`` plus one head per embedded tier, fitted on ``SCORES``."""
    examples = load_operator(SCORES)
    embedder = build_embedder(config)
    if embedder.name != model.embedder:
        raise ValueError(f"{embedder.name} vectors for a model of {model.embedder}")
    texts = [e.text for e in examples]
    vectors = cached_embed(embedder, texts, embedding_cache_path(embedder.name))
    features = np.stack([text_features(e.messages, e.text) for e in examples])
    z = (np.concatenate([vectors, features], axis=1) - model.mean) / model.scale
    direction = easiness_direction(model)
    h = z.astype(np.float64) @ direction
    # The reference traffic's easiness, read back off the strongest head's logits.
    strongest = int(np.argmax(np.linalg.norm(model.coef, axis=1)))
    slope = float(np.linalg.norm(model.coef[strongest]))
    h_reference = (model.reference_logits[:, strongest] - model.intercept[strongest]) / slope
    names = list(examples[0].scores or {})
    if set(names) & set(model.models):
        raise ValueError(f"{model.embedder}: already has heads for {names}")
    heads = {}
    for name in names:
        y = np.array([(e.scores or {})[name] for e in examples], dtype=np.float64)
        heads[name] = fit_head(h, y)
    coef = np.stack([b * direction for _, b in heads.values()]).astype(np.float32)
    intercept = np.array([a for a, _ in heads.values()], dtype=np.float32)
    reference = np.stack([a + b * h_reference for a, b in heads.values()], axis=1)
    info = {
        **model.info,
        "heads_on_item_function": {
            "data": str(SCORES.relative_to(REPO)),
            "items": len(examples),
            "heads": {n: [round(a, 6), round(b, 6)] for n, (a, b) in heads.items()},
        },
    }
    return replace(
        model,
        models=(*model.models, *names),
        coef=np.concatenate([model.coef, coef]),
        intercept=np.concatenate([model.intercept, intercept]),
        reference_logits=np.concatenate([model.reference_logits, reference.astype(np.float32)], 1),
        info=info,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=REPO / "config" / "gateway.yaml")
    args = parser.parse_args()
    classifier = load_effective_config(args.config).routing.classifier or ClassifierConfig()
    path = shipped_model(classifier, "quality.npz") or SHIPPED_QUALITY
    fitted = rows()
    SCORES.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fitted))
    print(f"{len(fitted)} FIT prompts answered by all three tiers -> {SCORES}", flush=True)
    model = QualityModel.load(path)
    extended = with_heads(model, classifier)
    extended.save(path)
    added = extended.info["heads_on_item_function"]["heads"]
    print(f"{path}: {len(model.models)} heads kept, added {json.dumps(added)}")


if __name__ == "__main__":
    main()
