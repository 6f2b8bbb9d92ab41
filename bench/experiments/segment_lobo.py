"""The segment guard on training families: leave one benchmark out, three LLMRouter tiers.

    python -m bench.experiments.segment_lobo [--families mmlu,gsm8k,human-eval]

No training family keeps RouterBench's three tiers once it is left out (Mistral-7B was
scored on ARC-Challenge alone), so the guard is checked on a ladder of LLMRouter's models
instead, priced like issue 24's hosted ladder: Mistral-7B-v0.3 (0.06 USD per M tokens),
Llama-3.1-8B (0.18) and ChatQA-1.5-70B (0.88). For each family every row of it is removed,
the quality model fitted on the rest, and the family's LLMRouter rows routed at ``cost
0.25`` and ``quality 0.95`` twice: choosing among every tier (before the guard) and
within the objective's segment of the predicted hull (``routers/objective_segment.py``).
Margins over the fixed-tier hull, as ``eval-classifier`` prints them. Nothing held out is
read. Slow: one full fit per family.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

from policies.routing_spec import ClassifierConfig
from routers.embedders import build_embedder
from routers.lambda_sketch import lambda_for
from routers.objective import Objective, choose, route_traffic, sketch_of
from routers.training import datasets
from routers.training.batch import cached_embed, embedding_cache_path
from routers.training.complexity_fit import feature_matrix
from routers.training.datasets import family
from routers.training.frontier import hull_accuracy, point
from routers.training.quality_fit import fit_quality
from routers.training.tier_sets import ANSWER_TOKENS, expected_cost, tier_set

LADDER = ("mistral-7b-instruct-v0.3", "llama-3.1-8b-instruct", "llama3-chatqa-1.5-70b")
PRICES = ((0.06, 0.06), (0.18, 0.18), (0.88, 0.88))
OBJECTIVES = (Objective("cost", 0.25), Objective("quality", 0.95))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="mmlu,gsm8k,human-eval")
    args = parser.parse_args(argv)
    train = datasets.shared_splits().train
    embedder = build_embedder(ClassifierConfig())
    cache = embedding_cache_path(embedder.name)
    vectors = cached_embed(embedder, [e.text for e in train], cache)
    margins: dict[str, list[float]] = {}
    for name in args.families.split(","):
        keep = [i for i, e in enumerate(train) if family(e.benchmark) != name]
        rows = [
            e
            for e in train
            if family(e.benchmark) == name and e.source.startswith("LLMRouter") and e.scores
        ]
        model = fit_quality([train[i] for i in keep], vectors[keep], embedder.name)
        base = tier_set(f"{name}@LLMRouter", rows)
        correct = np.asarray([[(e.scores or {})[m] for m in LADDER] for e in rows], dtype=float)
        cost = expected_cost(base.lengths, PRICES, [ANSWER_TOKENS] * 3)
        scored = replace(base, models=LADDER, correct=correct, cost=cost, expected=cost)
        view = model.for_tiers(LADDER, {m: m for m in LADDER})
        held = cached_embed(embedder, [e.text for e in rows], cache)
        quality = view.predict(held, feature_matrix(rows)).astype(np.float64)
        cells = []
        for objective in OBJECTIVES:
            lam = lambda_for(sketch_of(quality, cost), objective.kind, objective.share)
            for label, tiers in (
                ("all tiers", choose(quality, cost, lam)),
                ("segment", route_traffic(quality, cost, objective, 1)[0]),
            ):
                spent = point(tiers, scored.correct, scored.cost)
                margin = spent.accuracy - hull_accuracy(scored.fixed, spent.cost)
                margins.setdefault(f"{objective.kind} {label}", []).append(margin)
                cells.append(f"{objective.kind} {label} {margin:+.3f} at {spent.cost:5.1%}")
        print(f"{scored.name:<26} n={len(rows):>4}  " + "  ".join(cells), flush=True)
    for key, values in margins.items():
        print(f"{key:<20} mean margin {np.mean(values):+.4f}, smallest {min(values):+.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
