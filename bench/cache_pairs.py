"""Precision and recall of the semantic cache on data/cache_pairs.jsonl, with MiniLM.

    python bench/cache_pairs.py [--threshold T]

Prints, with and without the guard (numbers, negations, reordering), the lowest
threshold with zero false hits and precision/recall there, and the same at the
shipped default (``policies.schema.DEFAULT_SEMANTIC_THRESHOLD``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from policies.schema import DEFAULT_SEMANTIC_THRESHOLD
from routers.embedding import SentenceTransformerEmbedder
from routers.semantic_eval import (
    Scores,
    evaluate,
    load_pairs,
    score_pairs,
    zero_false_hit_threshold,
)


def line(label: str, scores: Scores) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(scores.false_by_kind.items())) or "none"
    return (
        f"{label:<34} threshold {scores.threshold:.2f}: precision {scores.precision:.3f} "
        f"recall {scores.recall:.3f} ({scores.true_hits}/{scores.positives} paraphrases hit, "
        f"{scores.false_hits}/{scores.negatives} near-misses hit: {kinds})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threshold", type=float, default=DEFAULT_SEMANTIC_THRESHOLD)
    args = parser.parse_args()
    pairs = load_pairs()
    embedder = SentenceTransformerEmbedder()
    scored = await score_pairs(embedder, pairs)
    print(f"{len(pairs)} pairs, {sum(1 for p in scored if p.match)} paraphrases")
    for use_guard, name in ((False, "cosine only"), (True, "cosine + guard (shipped)")):
        best = zero_false_hit_threshold(scored, use_guard=use_guard)
        print(line(f"{name}, zero-false-hit", evaluate(scored, best, use_guard=use_guard)))
        at_default = evaluate(scored, args.threshold, use_guard=use_guard)
        print(line(f"{name}, at --threshold", at_default))
    for t in (0.80, 0.85, 0.88, 0.90, 0.92, 0.95):
        print(line("cosine + guard", evaluate(scored, t)))
    misses = sorted((p for p in scored if p.match), key=lambda p: p.similarity)[:5]
    print("lowest-scoring paraphrases:", ", ".join(f"{p.id} {p.similarity:.3f}" for p in misses))
    worst = sorted((p for p in scored if not p.match and p.comparable), key=lambda p: -p.similarity)
    print(
        "highest near-misses the guard lets through:",
        ", ".join(f"{p.id}/{p.kind} {p.similarity:.3f}" for p in worst[:5]),
    )


if __name__ == "__main__":
    asyncio.run(main())
