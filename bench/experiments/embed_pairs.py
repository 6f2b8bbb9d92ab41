"""The semantic cache's pair suite, one embedder beside another: recall and false hits.

    python -m bench.experiments.embed_pairs [--embedders onnx,static] [--no-verifier]

For each embedder (the registry's names, built as ``routing.classifier`` would build
them) the pairs of ``tests/routers/test_semantic_pairs.py`` on their own held-out split,
as the cache decides: cosine ≥ the shipped ``semantic_threshold`` (0.85), then

- ``strict``: the rules alone (``routers/verifier/alignment.py``), the generated held-out
  pairs (``load_pairs("heldout")``);
- ``learned``: the rules, then the cross-encoder at the demo tenant's bound
  (``max_wrong_rate: 0.001``, its calibrated threshold) on the verifier's held-out part
  and, apart, on the evaluation-only external sets (``routers/verifier_data.py``).

The first stage is the only thing that changes between embedders: the rules and the
verifier see the same pairs. Also the cosine threshold a tenant would need for zero false
hits would be meaningless with the rules (they alone keep the tune split clean), so the
second threshold per embedder is the one at which as many *tune* paraphrases pass the
first stage as pass the first embedder's at 0.85 (matched on tune, never on held-out
data), and the held-out figures at it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Sequence

from policies.routing_spec import ClassifierConfig
from policies.schema import DEFAULT_SEMANTIC_THRESHOLD
from routers.embedders import build_embedder
from routers.embedding import SyncEmbedder
from routers.training.semantic_eval import ScoredPair, evaluate, load_pairs, score_pairs
from routers.training.verifier_eval import VerifiedPair, score_verifier_pairs

MAX_WRONG_RATE = 0.001


def strict_line(name: str, scored: Sequence[ScoredPair], threshold: float) -> str:
    s = evaluate(scored, threshold, "strict")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(s.false_by_kind.items())) or "none"
    return (
        f"{name:<34} cosine≥{threshold:.2f}  recall {s.recall:.3f} ({s.true_hits}/{s.positives})"
        f"  false hits {s.false_hits}/{s.negatives} ({kinds})"
    )


def learned_line(name: str, scored: Sequence[VerifiedPair], cosine: float, threshold: float) -> str:
    hits = Counter((p.pair.kind, p.pair.match) for p in scored if p.hit(cosine, threshold))
    positives = sum(1 for p in scored if p.pair.match)
    negatives = len(scored) - positives
    true = sum(n for (_, match), n in hits.items() if match)
    false = {k: n for (k, match), n in hits.items() if not match}
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(false.items())) or "none"
    reach = sum(1 for p in scored if p.cosine >= cosine)
    return (
        f"{name:<34} cosine≥{cosine:.2f}  recall {true / max(positives, 1):.3f} "
        f"({true}/{positives})  false hits {sum(false.values())}/{negatives} ({kinds}); "
        f"{reach} of {len(scored)} pairs past the first stage"
    )


class RememberedScorer:
    """The cross-encoder's probability per pair, computed once for every embedder (it
    does not depend on the first stage)."""

    def __init__(self) -> None:
        from routers.verifier.model import CrossEncoderVerifier

        self.model = CrossEncoderVerifier()
        self.known: dict[tuple[str, str], float] = {}

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        new = [p for p in pairs if p not in self.known]
        if new:
            self.known.update(zip(new, self.model.score(new), strict=True))
        return [self.known[p] for p in pairs]


def reach(scored: Sequence[ScoredPair], threshold: float) -> float:
    """The share of paraphrases whose cosine passes ``threshold``."""
    positives = [p.similarity for p in scored if p.match]
    return sum(1 for c in positives if c >= threshold) / len(positives)


def matched_threshold(scored: Sequence[ScoredPair], share: float) -> float:
    """The highest threshold (0.01 grid) passing at least ``share`` of the paraphrases."""
    for step in range(100, 0, -1):
        if reach(scored, step / 100) >= share:
            return step / 100
    return 0.01


async def one(name: str, scorer: RememberedScorer | None, share: float | None) -> float:
    """Prints the embedder's lines; returns its tune paraphrases' reach at 0.85."""
    embedder: SyncEmbedder = build_embedder(ClassifierConfig(embedder=name))  # type: ignore[arg-type]
    started = time.perf_counter()
    print(f"\n== {embedder.name} (dim {embedder.dim})", flush=True)
    scored = await score_pairs(embedder, load_pairs())
    tune = [p for p in scored if p.split == "tune"]
    held = [p for p in scored if p.split == "heldout"]
    own = reach(tune, DEFAULT_SEMANTIC_THRESHOLD)
    chosen = DEFAULT_SEMANTIC_THRESHOLD if share is None else matched_threshold(tune, share)
    print(f"tune paraphrases past 0.85: {own:.3f}; matched threshold {chosen:.2f}")
    print(strict_line("strict, heldout", held, DEFAULT_SEMANTIC_THRESHOLD))
    print(strict_line("strict, tune", tune, DEFAULT_SEMANTIC_THRESHOLD))
    print(strict_line("strict, heldout at matched", held, chosen))
    if scorer is not None:
        from routers.verifier_data import verifier_pairs

        from routers.verifier.model import load_calibration

        threshold = load_calibration().threshold(MAX_WRONG_RATE)
        assert threshold is not None
        for part in ("heldout", "external"):
            pairs = verifier_pairs(part)  # type: ignore[arg-type]
            learned = await score_verifier_pairs(embedder, scorer, pairs)
            for cosine in sorted({DEFAULT_SEMANTIC_THRESHOLD, chosen}, reverse=True):
                print(learned_line(f"learned 0.001, {part}", learned, cosine, threshold))
    await embedder.aclose()
    print(f"({time.perf_counter() - started:.0f} s)", flush=True)
    return own


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedders", default="onnx,static")
    parser.add_argument("--no-verifier", action="store_true")
    args = parser.parse_args()
    scorer = None if args.no_verifier else RememberedScorer()
    share = None
    for name in args.embedders.split(","):
        own = await one(name, scorer, share)
        share = own if share is None else share


if __name__ == "__main__":
    asyncio.run(main())
