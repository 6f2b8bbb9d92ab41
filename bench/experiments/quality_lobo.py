"""Leave one benchmark out for the per-tier quality model: choose variants on training data.

    python -m bench.experiments.quality_lobo [--families mmlu,gsm8k,...] ['{"group_offsets": true}']

For each training family: every row of it (all sources) is removed, the quality model is
fitted on the rest (with its own out-of-family calibration), and the family's rows are
routed by the objective policy with each source's models as the tiers, at ``cost 0.25``
and ``quality 0.95``: accuracy, cost and the margin over the fixed-tier hull, as
``eval-classifier`` reports held-out sets. Nothing held out is read. The options are
``QualityOptions`` fields as JSON. Slow: one full fit (six L-BFGS runs) per family.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from policies.routing_spec import ClassifierConfig
from routers.embedders import build_embedder
from routers.objective import Objective
from routers.training import datasets
from routers.training.batch import cached_embed, embedding_cache_path
from routers.training.complexity_fit import feature_matrix
from routers.training.datasets import family
from routers.training.quality_fit import QualityOptions, fit_quality
from routers.training.tier_sets import run_policy, tier_set

FAMILIES = "mmlu,gsm8k,human-eval,gpqa,commonsense-qa"
OBJECTIVES = (Objective("cost", 0.25), Objective("quality", 0.95))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=FAMILIES)
    parser.add_argument("options", nargs="?", default="{}")
    args = parser.parse_args(argv)
    options = QualityOptions(**json.loads(args.options))
    train = datasets.shared_splits().train
    embedder = build_embedder(ClassifierConfig())
    cache = embedding_cache_path(embedder.name)
    vectors = cached_embed(embedder, [e.text for e in train], cache)
    margins: dict[str, list[float]] = {o.kind: [] for o in OBJECTIVES}
    for name in args.families.split(","):
        keep = [i for i, e in enumerate(train) if family(e.benchmark) != name]
        held = [e for e in train if family(e.benchmark) == name and e.scores]
        model = fit_quality([train[i] for i in keep], vectors[keep], embedder.name, options)
        by_source: dict[str, list[datasets.Example]] = {}
        for example in held:
            by_source.setdefault(example.source.split("/")[0], []).append(example)
        for source, rows in sorted(by_source.items()):
            if source == "RouterDC":
                continue  # its cheapest model is scored on this family only: no ability left
            scored = tier_set(f"{name}@{source}", rows)
            view = model.for_tiers(scored.models, {m: m for m in scored.models})
            held_vectors = cached_embed(embedder, [e.text for e in rows], cache)
            quality = view.predict(held_vectors, feature_matrix(rows)).astype(np.float64)
            cells = []
            for objective in OBJECTIVES:
                result = run_policy(quality, scored, objective)
                margins[objective.kind].append(result.margin)
                cells.append(
                    f"{objective.kind} {objective.share:g}: {result.point.accuracy:.3f} at "
                    f"{result.point.cost:6.1%}, hull {result.hull:.3f}, margin {result.margin:+.3f}"
                )
            print(f"{scored.name:<24} n={len(rows):>5}  " + "  |  ".join(cells), flush=True)
    for kind, values in margins.items():
        if values:
            print(f"{kind}: mean margin {np.mean(values):+.4f}, smallest {min(values):+.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
