"""Precision and recall of the semantic cache, tuned on one part and reported on another.

    python -m bench.experiments.cache_pairs [--embedder torch|onnx] [--threshold T]
        [--mode strict|guard]

The pairs (routers.training.semantic_eval.load_pairs) are split by kind and template into
``tune`` and ``heldout``. For each candidate decision (cosine only; cosine + the old
guard; cosine + guard + the token-alignment verifier) the threshold is picked on the
tune part alone (the lowest with zero false hits there) and then applied unchanged to
the held-out part. Then per-kind precision/recall at the shipped default
(``policies.schema`` CachePolicy) on both parts, the held-out false hits, and what one
verification costs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from policies.schema import CachePolicy
from routers.embedding import Embedder, SentenceTransformerEmbedder
from routers.training.semantic_eval import (
    Mode,
    ScoredPair,
    Scores,
    by_kind,
    evaluate,
    load_pairs,
    score_pairs,
    zero_false_hit_threshold,
)
from routers.verifier.alignment import same_question


def line(label: str, scores: Scores) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(scores.false_by_kind.items())) or "none"
    return (
        f"{label:<28} t={scores.threshold:.2f} precision {scores.precision:.3f} "
        f"recall {scores.recall:.3f} ({scores.true_hits}/{scores.positives} paraphrases hit, "
        f"{scores.false_hits}/{scores.negatives} near-misses hit: {kinds})"
    )


def table(name: str, scored: list[ScoredPair], threshold: float, mode: Mode) -> None:
    print(f"\n{name}: per kind at t={threshold:.2f}, {mode}")
    print(
        f"  {'kind':<18} {'pairs':>5} {'match':>5} {'hits':>5} {'false':>5} "
        f"{'prec':>6} {'recall':>6}"
    )
    for kind, s in by_kind(scored, threshold, mode).items():
        n = s.positives + s.negatives
        recall = f"{s.recall:.3f}" if s.positives else "-"
        hits = s.true_hits + s.false_hits
        precision = f"{s.precision:.3f}" if hits else "-"
        print(
            f"  {kind:<18} {n:>5} {s.positives:>5} {hits:>5} {s.false_hits:>5} "
            f"{precision:>6} {recall:>6}"
        )
    print("  " + line("all", evaluate(scored, threshold, mode)))


def make_embedder(name: str) -> Embedder:
    if name == "onnx":
        from routers.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder()
    return SentenceTransformerEmbedder()


def verify_cost(pairs: list[dict[str, object]]) -> tuple[float, float]:
    """Median and p99 microseconds of one ``same_question`` on a pair not seen before."""
    samples = []
    for p in pairs:
        a, b = f"{p['a']} ", f" {p['b']}"  # new strings: no cached tokenisation
        t0 = time.perf_counter()
        same_question(a, b)
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * len(samples))]


async def main() -> None:
    default = CachePolicy()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", choices=("torch", "onnx"), default="torch")
    parser.add_argument("--threshold", type=float, default=default.semantic_threshold)
    parser.add_argument("--mode", choices=("strict", "guard"), default="strict")
    args = parser.parse_args()
    pairs = load_pairs()
    embedder = make_embedder(args.embedder)
    scored = await score_pairs(embedder, pairs)
    await embedder.aclose()
    tune = [p for p in scored if p.split == "tune"]
    held = [p for p in scored if p.split == "heldout"]
    kinds = {s: len({p.kind for p in scored if p.split == s}) for s in ("tune", "heldout")}
    print(
        f"{len(pairs)} pairs, {len({p.kind for p in scored})} kinds: tune {len(tune)} "
        f"({kinds['tune']} kinds), heldout {len(held)} ({kinds['heldout']} kinds, "
        f"{len({p.kind for p in held} - {p.kind for p in tune})} never in tune); "
        f"embedder {args.embedder}"
    )
    print("\nCandidates: threshold chosen on tune (zero false hits there), applied to heldout")
    modes: tuple[tuple[Mode, str], ...] = (
        ("cosine", "cosine only"),
        ("guard", "cosine + guard (before)"),
        ("strict", "cosine + guard + verifier"),
    )
    for mode, name in modes:
        t = min(zero_false_hit_threshold(tune, mode), 1.0)
        print(line(f"{name}, tune", evaluate(tune, t, mode)))
        print(line(f"{name}, heldout", evaluate(held, t, mode)))
        print(line(f"{name}, heldout @default", evaluate(held, args.threshold, mode)))
    print("\nThe verifier's threshold sweep (held-out false hits / paraphrase recall):")
    for t in (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9):
        print("  " + line("heldout strict", evaluate(held, t, "strict")))
    table("tune", tune, args.threshold, args.mode)
    table("heldout", held, args.threshold, args.mode)
    false = [
        p for p in held if not p.match and p.similarity >= args.threshold and p.passes(args.mode)
    ]
    print(f"\nheldout false hits at the default: {len(false)}", [p.id for p in false][:20])
    p50, p99 = verify_cost(pairs)
    print(f"verification cost per candidate: p50 {p50:.1f} us, p99 {p99:.1f} us (n={len(pairs)})")


if __name__ == "__main__":
    asyncio.run(main())
