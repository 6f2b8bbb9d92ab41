"""Where labelled pairs are lost (or stopped) on the way to a semantic hit: a funnel.

    python -m bench.experiments.verifier_funnel [--cosine 0.85] [--rate 0.001]
        [--parts heldout external]

Each pair goes through the cache's decision in the cache's order and is counted at the
first stage that stops it: the guard (numbers, units, negations: part of the semantic
prefix, so never even a candidate), the cosine threshold, each hard veto of
``routers.verifier.rules`` (numbers, entities, code, reordered, substituted), then the
cross-encoder's threshold for ``--rate``. ``served`` is what passes: the rules' ``same``
or the model. Paraphrases should reach ``served``; near-misses should not. The pairs are
scored as ``bench.experiments.verifier_candidates`` scores them
(``routers.training.verifier_eval``).
Reported on every part; only ``train`` and ``calib`` may be looked at to change
anything (the evaluation sets never).
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from routers.training.verifier_eval import VerifiedPair, score_verifier_pairs
from routers.training.verifier_pairs import Part, verifier_pairs
from routers.verifier.model import MODEL_DIR, CrossEncoderVerifier, load_calibration

STAGES = (
    "guard",
    "cosine",
    "numbers",
    "entities",
    "code",
    "reordered",
    "substituted",
    "verifier",
    "served by rules",
    "served by model",
)


def stage(pair: VerifiedPair, cosine: float, threshold: float | None) -> str:
    """The first stage of the cache's decision that stops ``pair``, or how it is served."""
    if pair.reason == "guard":
        return "guard"
    if pair.cosine < cosine:
        return "cosine"
    if pair.verdict == "different":
        return str(pair.reason)
    if pair.verdict == "same":
        return "served by rules"
    if threshold is not None and (pair.probability or 0.0) >= threshold:
        return "served by model"
    return "verifier"


def funnel(scored: Sequence[VerifiedPair], cosine: float, threshold: float | None) -> Counter[str]:
    return Counter(stage(p, cosine, threshold) for p in scored)


def table(
    groups: dict[str, Sequence[VerifiedPair]], cosine: float, threshold: float | None
) -> list[str]:
    """One markdown row per group: pairs, then how many each stage stops, then served."""
    head = "| set | pairs | " + " | ".join(STAGES) + " |"
    lines = [head, "|" + "---|" * (len(STAGES) + 2)]
    for name, rows in groups.items():
        counts = funnel(rows, cosine, threshold)
        cells = " | ".join(str(counts.get(s, 0)) for s in STAGES)
        lines.append(f"| {name} | {len(rows)} | {cells} |")
    return lines


def groups_of(part: str, scored: list[VerifiedPair]) -> dict[str, list[VerifiedPair]]:
    out: dict[str, list[VerifiedPair]] = {}
    for s in scored:
        side = "paraphrases" if s.pair.match else "near-misses"
        source = "" if s.pair.source == "project" or part == "heldout" else f" {s.pair.source}"
        out.setdefault(f"{part}{source} {side}", []).append(s)
        if part == "external":
            out.setdefault(f"{part} (all) {side}", []).append(s)
    return dict(sorted(out.items()))


async def score(parts: Sequence[Part], model: Path | None) -> dict[str, list[VerifiedPair]]:
    from routers.onnx_embedder import OnnxEmbedder

    embedder = OnnxEmbedder()
    verifier = CrossEncoderVerifier(model) if model is not None else None
    scorer = verifier.score if verifier is not None else None
    try:
        return {p: await score_verifier_pairs(embedder, scorer, verifier_pairs(p)) for p in parts}
    finally:
        await embedder.aclose()


def report(
    scored: dict[str, list[VerifiedPair]], cosines: Sequence[float], threshold: float | None
) -> None:
    for cosine in cosines:
        print(f"\ncosine >= {cosine}, verifier threshold {threshold}:")
        groups: dict[str, list[VerifiedPair]] = {}
        for part, rows in scored.items():
            groups.update(groups_of(part, rows))
        print("\n".join(table(groups, cosine, threshold)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cosine", type=float, nargs="+", default=[0.85, 0.75])
    parser.add_argument("--rate", type=float, default=0.001)
    parser.add_argument("--model", type=Path, default=MODEL_DIR)
    parser.add_argument("--parts", nargs="+", default=["calib", "heldout", "external"])
    args = parser.parse_args()
    threshold = load_calibration(args.model).threshold(args.rate)
    scored = await score(args.parts, args.model)
    report(scored, args.cosine, threshold)


if __name__ == "__main__":
    asyncio.run(main())
