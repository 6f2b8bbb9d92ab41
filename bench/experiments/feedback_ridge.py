"""Choosing ``routing.feedback.refit.ridge`` without the held-out rows: the feedback loop
simulated offline on the training family's three-tier rows (RouterDC's ARC-Challenge).

    python -m bench.experiments.feedback_ridge [--ridges 10,30,100,300] [--splits 8]
        [--replayed 400]

Per split: ``--replayed`` random rows are the traffic; each goes to the tier the shipped
``target_share`` 70/20/10 picks, its neighbour answers too, and the rubric's verdict from
the known correctness labels the cheaper one (as ``judge.labels`` does). The refit is
fitted and checked as online (``routers.refit.check_refit``); on the other rows, the
accuracy at the shipped policy's cost under the cost rule (``routers.training.equal_cost``) of the
refit and of the base model. Medians and ranges over the splits.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from policies.routing_spec import ClassifierConfig
from policies.stores.feedback import Label
from routers.classifier import ComplexityModel
from routers.embedders import build_embedder
from routers.features import text_features
from routers.refit import RefitOptions, RefittedQuality, check_refit, label_set
from routers.tier_quality import ComplexityQuality
from routers.training import datasets, equal_cost
from routers.training.batch import cached_embed, embedding_cache_path

TIERS = ("small", "medium", "large")


def shipped(scores: np.ndarray, seen: np.ndarray) -> np.ndarray:
    low, high = np.quantile(seen, 0.7), np.quantile(seen, 0.9)
    return np.where(scores < low, 0, np.where(scores >= high, 2, 1))


def at_cost(
    model: ComplexityQuality | RefittedQuality,
    vectors: np.ndarray,
    features: np.ndarray,
    expected: np.ndarray,
    correct: np.ndarray,
    cost: np.ndarray,
    budget: float,
) -> float:
    """Accuracy of the cost rule over ``model`` at ``budget`` (a share of always-large)."""
    points = equal_cost.policy_points(model.predict(vectors, features), expected, correct, cost)
    return equal_cost.envelope_at(points, budget)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ridges", default="10,30,100,300")
    parser.add_argument("--splits", type=int, default=8)
    parser.add_argument("--replayed", type=int, default=400)
    args = parser.parse_args()
    rows = [
        e
        for e in datasets.shared_splits().train
        if e.tiers is not None and e.costs is not None and e.benchmark == "arc-challenge"
    ]
    embedder = build_embedder(ClassifierConfig())
    vectors = cached_embed(embedder, [e.text for e in rows], embedding_cache_path(embedder.name))
    features = np.stack([text_features(e.messages, e.text) for e in rows])
    correct = np.array([e.tiers for e in rows], np.float64)
    cost = np.array([e.costs for e in rows], np.float64)
    base = ComplexityQuality(ComplexityModel.load(), TIERS)
    quality = base.predict(vectors, features)
    score = 1.0 - quality[:, 0]
    print(f"{len(rows)} ARC-Challenge rows with three tiers; {args.splits} splits")
    print("| ridge | refit - base at equal cost | refit - shipped | hold-out log-loss gain |")
    print("|---|---|---|---|")
    for ridge in (float(r) for r in args.ridges.split(",")):
        gains, over_shipped, losses = [], [], []
        for split in range(args.splits):
            order = np.random.default_rng(split).permutation(len(rows))
            seen, rest = order[: args.replayed], order[args.replayed :]
            served = shipped(score[seen], score[seen])
            other = np.where(served == 2, 1, served + 1)
            labels = []
            for j, i in enumerate(seen):
                cheap, ref = sorted((served[j], other[j]))
                labels.append(
                    Label(str(i), TIERS[cheap], bool(correct[i, cheap] >= correct[i, ref]),
                          "judge", vectors[i].astype(np.float16).tobytes(),
                          tuple(float(x) for x in features[i]), float(j), "bench",
                          TIERS[ref], float(cost[i, cheap]), float(cost[i, ref]))
                )  # fmt: skip
            options = RefitOptions(ridge=ridge, shared=False)  # as documented: tiers alone
            result = check_refit(base, None, label_set(labels, TIERS), options)
            assert result is not None and result.correction is not None
            refit = RefittedQuality(base, result.correction)
            budget, ship = equal_cost.outcome(
                shipped(score[rest], score[seen]), correct[rest], cost[rest]
            )
            expected = cost[seen].mean(axis=0)

            here = (vectors[rest], features[rest], expected, correct[rest], cost[rest], budget)
            refitted = at_cost(refit, *here)
            gains.append(refitted - at_cost(base, *here))
            over_shipped.append(refitted - ship)
            losses.append(result.metrics["loss_base"] - result.metrics["loss_refit"])
        cells = [
            f"{statistics.median(v):+.4f} [{min(v):+.3f}, {max(v):+.3f}]"
            for v in (gains, over_shipped, losses)
        ]
        print(f"| {ridge:g} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
