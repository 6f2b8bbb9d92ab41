"""Leave-one-benchmark-out: retrain without a whole family, score that family.

    python -m bench.experiments.classifier_lobo [--families arc-challenge,gpqa,math,mmlu,gsm8k]
        ['{}' ...]

For each family (the benchmark across sources, ``routers/training/datasets.py: family``) the
model is
refitted on the training split minus every row of that family (for gsm8k that includes the
GSM8K-train weak labels and the golden training half), then APGR is computed on the
family's labelled rows per source (the pool's, and the golden held-out half) next to the
prompt-length router. Without variant arguments: ranking only, the within ranker, no
stacking (``calibration_folds=0``). Each argument is a JSON object of
``routers.training.complexity_fit.TrainOptions`` fields, fitted in full (stacking included, its
folds drawn
from the remaining families), so variants are chosen on training families only, never on
the held-out benchmarks ``eval-classifier`` reports. Embeddings come from the serving
embedder through the on-disk cache, so the first run embeds the pool (minutes), later ones
do not.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from policies.routing_spec import ClassifierConfig
from routers.embedders import build_embedder
from routers.embedding import SyncEmbedder
from routers.training import datasets
from routers.training.batch import cached_embed, embedding_cache_path, prompt_length
from routers.training.complexity_fit import TrainOptions, feature_matrix, fit
from routers.training.evaluation import report

FAMILIES = "arc-challenge,gpqa,math,mmlu,gsm8k"
RANKING_ONLY = '{"calibration_folds": 0}'


def _family_sets(
    name: str, pool: list[datasets.Example], splits: datasets.Splits
) -> dict[str, list[datasets.Example]]:
    sets: dict[str, list[datasets.Example]] = {}
    for e in pool:
        if datasets.family(e.benchmark) == name and e.weak is not None and e.strong is not None:
            sets.setdefault(e.source.split("/")[0], []).append(e)
    sets["golden"] = [e for e in splits.golden_test if datasets.family(e.benchmark) == name]
    return {source: rows for source, rows in sets.items() if rows}


def _score_family(
    name: str,
    variant: str,
    embedder: SyncEmbedder,
    cache: Path,
    splits: datasets.Splits,
    pool: list[datasets.Example],
) -> list[tuple[str, int, float, float]]:
    train = [e for e in splits.train if datasets.family(e.benchmark) != name]
    vectors = cached_embed(embedder, [e.text for e in train], cache)
    model = fit(train, vectors, embedder.name, TrainOptions(**json.loads(variant)))
    out = []
    for source, rows in _family_sets(name, pool, splits).items():
        v = cached_embed(embedder, [e.text for e in rows], cache)
        scores = model.probabilities(v, feature_matrix(rows))[:, 0].astype(np.float64)
        weak = np.array([e.weak for e in rows], dtype=np.float64)
        strong = np.array([e.strong for e in rows], dtype=np.float64)
        ours = report(scores, weak, strong).apgr
        length = report(np.array([prompt_length(e) for e in rows]), weak, strong).apgr
        out.append((f"{name}@{source}", len(rows), ours, length))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--families", default=FAMILIES)
    parser.add_argument("variants", nargs="*", help="JSON objects of TrainOptions fields")
    args = parser.parse_args()
    embedder = build_embedder(ClassifierConfig())
    cache = embedding_cache_path(embedder.name)
    splits = datasets.shared_splits()
    pool = datasets.load_pool()
    for variant in args.variants or [RANKING_ONLY]:
        print(f"variant {variant}")
        print(f"{'family@source':<28} {'n':>5} | {'APGR':>6} {'length':>6} {'diff':>7}")
        diffs = []
        for name in args.families.split(","):
            for label, n, ours, length in _score_family(
                name, variant, embedder, cache, splits, pool
            ):
                if not np.isnan(ours - length):
                    diffs.append(ours - length)
                print(f"{label:<28} {n:>5} | {ours:>6.3f} {length:>6.3f} {ours - length:>+7.3f}")
        worst = min(diffs) if diffs else float("nan")
        print(f"mean diff {np.mean(diffs):+.3f}, worst {worst:+.3f}\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
