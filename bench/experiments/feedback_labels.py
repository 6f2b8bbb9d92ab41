"""Choosing what a judge's label means, without the held-out rows: the feedback loop
simulated offline on the training family's three-tier rows (RouterDC's ARC-Challenge), over
the shipped per-tier quality model and objective.

    python -m bench.experiments.feedback_labels [--splits 8] [--replayed 400] [--ridge 100]

Per split: ``--replayed`` random rows are the traffic, routed by the shipped objective
(``{quality: 0.95}``, λ from those rows) over the base model; each row's neighbouring tier
answers too (or any other tier, evenly: what the gateway does now), and the known
correctness labels the pair, in one of two designs:

* ``cheaper, relative``: one label, of the cheaper tier, "at least as right as the other"
  (the rubric before: acceptable when both are wrong);
* ``each answer``: two labels, each tier's own correctness (the rubric now), so the
  largest tier, every pair's reference when it is in one, is labelled too.

The refit is fitted per tier or with a part shared by the tiers (``RefitOptions.shared``)
and checked as online (``routers.refit.check_refit``); on the other
rows, the accuracy of the objective's rule at any λ (``routers.training.equal_cost``) over the refit
minus over the base, at the cost the base policy spends there. Medians and ranges.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from gateway.learning.sampler import shadow_tier
from policies.routing_spec import ClassifierConfig
from policies.stores.feedback import Label
from routers.embedders import build_embedder
from routers.features import text_features
from routers.objective import Objective, route_traffic
from routers.refit import RefitOptions, RefittedQuality, check_refit, label_set
from routers.setup import tier_view
from routers.training import datasets, equal_cost
from routers.training.batch import cached_embed, embedding_cache_path
from routers.training.tier_sets import ANSWER_TOKENS, PRICES, chars, expected_cost

TIERS = ("small", "medium", "large")
LADDER = ("mistral-7b-instruct", "mixtral-8x7b-instruct", "gpt-4-1106-preview")
# (label design, shadow tier, refit): the first row is the loop as it was first built
DESIGNS = (
    ("cheaper, relative", "neighbour", "per tier"),
    ("each answer", "neighbour", "per tier"),
    ("each answer", "neighbour", "shared"),
    ("each answer", "any other", "shared"),
)
NEIGHBOUR = ("cheaper, relative / neighbour", "each answer / neighbour")


def neighbour(served: int) -> int:
    return 1 if served == 2 else served + 1


def any_other(served: int, row: int) -> int:
    return TIERS.index(shadow_tier(list(TIERS), TIERS[served], f"row-{row}"))


def labels_of(
    design: str,
    rows: np.ndarray,
    served: np.ndarray,
    vectors: np.ndarray,
    features: np.ndarray,
    correct: np.ndarray,
    cost: np.ndarray,
) -> list[Label]:
    out: list[Label] = []
    for j, i in enumerate(rows):
        other = neighbour(int(served[j])) if design in NEIGHBOUR else any_other(served[j], i)
        cheap, ref = sorted((int(served[j]), int(other)))
        common = {
            "request_id": str(i),
            "source": "judge",
            "vector": vectors[i].astype(np.float16).tobytes(),
            "features": tuple(float(x) for x in features[i]),
            "ts": float(j),
            "tenant": "bench",
        }
        if design.startswith("cheaper, relative"):
            ok = bool(correct[i, cheap] >= correct[i, ref])
            out.append(
                Label(tier=TIERS[cheap], acceptable=ok, reference_tier=TIERS[ref],
                      cost_usd=float(cost[i, cheap]), reference_cost_usd=float(cost[i, ref]),
                      **common)  # type: ignore[arg-type]
            )  # fmt: skip
        else:
            out.append(
                Label(tier=TIERS[cheap], acceptable=bool(correct[i, cheap] >= 0.5),
                      reference_tier=TIERS[ref], cost_usd=float(cost[i, cheap]),
                      reference_cost_usd=float(cost[i, ref]), **common)  # type: ignore[arg-type]
            )  # fmt: skip
            out.append(
                Label(tier=TIERS[ref], acceptable=bool(correct[i, ref] >= 0.5),
                      cost_usd=float(cost[i, ref]), **common)  # type: ignore[arg-type]
            )  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--splits", type=int, default=8)
    parser.add_argument("--replayed", type=int, default=400)
    parser.add_argument("--ridge", type=float, default=100.0)
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
    lengths = np.array([chars(e) for e in rows], np.float64)
    expected = expected_cost(lengths, [PRICES[m] for m in LADDER], [ANSWER_TOKENS] * 3)
    relative = expected / expected[:, -1:]
    base = tier_view(ClassifierConfig(), TIERS)
    quality = base.predict(vectors, features).astype(np.float64)
    objective = Objective("quality", 0.95)
    print(f"{len(rows)} ARC-Challenge rows with three tiers; {args.splits} splits")
    print(
        "| label design | shadow tier | refit | labels | refit - base at equal cost "
        "| hold-out log-loss gain |"
    )
    print("|---|---|---|---|---|---|")
    for label_design, shadow, fit in DESIGNS:
        design = f"{label_design} / {shadow}"
        gains, losses, counts = [], [], []
        for split in range(args.splits):
            order = np.random.default_rng(split).permutation(len(rows))
            seen, rest = order[: args.replayed], order[args.replayed :]
            served, _ = route_traffic(quality[seen], expected[seen], objective, 200)
            labels = labels_of(design, seen, served, vectors, features, correct, cost)
            counts.append(len(labels))
            options = RefitOptions(ridge=args.ridge, shared=fit == "shared")
            result = check_refit(base, None, label_set(labels, TIERS), options)
            assert result is not None and result.correction is not None
            refit = RefittedQuality(base, result.correction)
            tiers, _ = route_traffic(quality[rest], expected[rest], objective, 200)
            budget = equal_cost.outcome(tiers, correct[rest], cost[rest])[0]

            def at(model: object, budget: float = budget, rest: np.ndarray = rest) -> float:
                p = model.predict(vectors[rest], features[rest])  # type: ignore[attr-defined]
                points = equal_cost.policy_points(p, relative[rest], correct[rest], cost[rest])
                return equal_cost.envelope_at(points, budget)

            gains.append(at(refit) - at(base))
            losses.append(result.metrics["loss_base"] - result.metrics["loss_refit"])
        cells = [
            f"{statistics.median(v):+.4f} [{min(v):+.3f}, {max(v):+.3f}]" for v in (gains, losses)
        ]
        head = f"| {label_design} | {shadow} | {fit} | {statistics.median(counts):.0f} | "
        print(head + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
