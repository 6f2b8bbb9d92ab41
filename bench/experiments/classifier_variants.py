"""Training variants side by side on the held-out sets (docs/classifier.md, "What helped").

    python -m bench.experiments.classifier_variants '{"calibration_folds": 0}' '{}' ...

Each argument is a JSON object of ``routers.training.complexity_fit.TrainOptions`` fields
(``{}``: the
shipped defaults). For each, the model is fitted on the training split and scored like
``tiergate eval-classifier``: APGR minus the length router's on every held-out set, the
three-tier set's best accuracy within 25 % of always-large cost minus length's, and the ECE
over all held-out rows. ``--no-anchors`` drops the hand-labelled anchors from training.
Embeddings come from the serving embedder through the on-disk cache.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from policies.routing_spec import ClassifierConfig
from routers.classifier import HEAD_LARGE, HEAD_MORE, ComplexityModel
from routers.embedders import build_embedder
from routers.embedding import SyncEmbedder
from routers.training import datasets
from routers.training.batch import (
    THREE_TIER_BUDGET,
    cached_embed,
    embedding_cache_path,
    evaluate,
    evaluate_three_tier,
    evaluation_sets,
    prompt_length,
    three_tier_set,
)
from routers.training.complexity_fit import TrainOptions, feature_matrix, fit
from routers.training.evaluation import best_three_tier, best_two_head_tier, calibration


def _scores(
    model: ComplexityModel,
    embedder: SyncEmbedder,
    rows: list[datasets.Example],
    cache: Path,
    head: str = HEAD_MORE,
) -> list[float]:
    vectors = cached_embed(embedder, [e.text for e in rows], cache)
    column = model.heads.index(head)
    return [float(p) for p in model.probabilities(vectors, feature_matrix(rows))[:, column]]


def _two_head(model: ComplexityModel, embedder: SyncEmbedder, three: list, cache: Path) -> str:
    """3-tier accuracy minus length's when P(needs large) picks the large tier."""
    if HEAD_LARGE not in model.heads:
        return "n/a"
    correct = np.array([e.tiers for e in three], dtype=np.float64)
    cost = np.array([e.costs for e in three], dtype=np.float64)
    more = np.asarray(_scores(model, embedder, three, cache))
    large = np.asarray(_scores(model, embedder, three, cache, HEAD_LARGE))
    lengths = np.array([prompt_length(e) for e in three])
    ours = best_two_head_tier(more, large, correct, cost, THREE_TIER_BUDGET)
    return f"{ours.accuracy - best_three_tier(lengths, correct, cost).accuracy:+.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variants", nargs="+", help="JSON objects of TrainOptions fields")
    parser.add_argument("--no-anchors", action="store_true")
    args = parser.parse_args()
    embedder = build_embedder(ClassifierConfig())
    cache = embedding_cache_path(embedder.name)
    splits = datasets.shared_splits()
    train = [e for e in splits.train if not (args.no_anchors and e.source == "anchors")]
    vectors = cached_embed(embedder, [e.text for e in train], cache)
    sets = {name: list(rows) for name, rows in evaluation_sets(splits).items()}
    three = three_tier_set(splits)
    print("variant | " + " | ".join(sets) + " | 3-tier | 3-tier two heads | ECE")
    for variant in args.variants:
        model = fit(train, vectors, embedder.name, TrainOptions(**json.loads(variant)))
        scores = {name: _scores(model, embedder, rows, cache) for name, rows in sets.items()}
        rows = evaluate(sets, scores, bootstrap=False)
        tiers = evaluate_three_tier(
            "three", three, _scores(model, embedder, three, cache), (0.3, 0.7), bootstrap=False
        )
        every = np.concatenate([np.asarray(scores[n]) for n in sets])
        weak = np.array([e.weak for n in sets for e in sets[n]], dtype=np.float64)
        cells = [f"{r.classifier.apgr - r.length.apgr:+.3f}" for r in rows]
        cells.append(f"{tiers.classifier.accuracy - tiers.length.accuracy:+.3f}")
        cells.append(_two_head(model, embedder, three, cache))
        cells.append(f"{calibration(every, 1 - weak).ece:.3f}")
        print(f"{variant} | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
