"""The semantic-cache verifier candidates side by side, on data none of them was tuned on.

    python -m bench.experiments.verifier_candidates [--rate 0.001] [--cosine 0.85] [--model DIR]

Every candidate runs behind the same rules (``routers.verifier.rules``: trivial edits
accepted, numbers / negations / entities / code identifiers / reorderings vetoed) and
decides only what they leave undecided:

- ``rules only``: undecided is refused (the ``strict`` setting);
- ``cosine, calibrated``: one cosine threshold for the bound (what a vCache-style
  threshold converges to without per-entry feedback, which offline sets do not have);
- ``vector head``: logistic regression over (|u-v|, u*v, cosine) of the two MiniLM
  vectors the cache already has, fitted on the ``train`` part;
- ``cross-encoder``: the MiniLM cross-encoder (``routers.training.verifier_fit``), ONNX int8.

Each learned threshold comes from ``--rate`` on the ``calib`` part only
(``routers.training.verifier_eval.calibrate``); the tables are the project's held-out pairs per
kind and the evaluation-only external sets per source. Last: ms per verified pair.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from routers.onnx_embedder import OnnxEmbedder
from routers.training.verifier_eval import VerifiedPair, calibrate, score_verifier_pairs
from routers.training.verifier_pairs import LabelledPair, verifier_pairs
from routers.verifier.model import MODEL_DIR, CrossEncoderVerifier
from routers.verifier.rules import rule_verdict

PARTS = ("train", "calib", "heldout", "external")


def features(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cos = np.sum(a * b, axis=1, keepdims=True)
    return np.hstack([np.abs(a - b), a * b, cos]).astype(np.float32)


def with_probabilities(scored: list[VerifiedPair], probs: Sequence[float]) -> list[VerifiedPair]:
    return [
        dataclasses.replace(s, probability=float(p) if s.verdict == "undecided" else None)
        for s, p in zip(scored, probs, strict=True)
    ]


def row(name: str, scored: Sequence[VerifiedPair], cosine: float, t: float | None) -> str:
    pos = [s for s in scored if s.pair.match]
    neg = [s for s in scored if not s.pair.match]
    hits = sum(s.hit(cosine, t) for s in pos)
    false = sum(s.hit(cosine, t) for s in neg)
    recall = hits / len(pos) if pos else float("nan")
    return (
        f"{name:<34} recall {hits:>4}/{len(pos):<4} ({recall:.3f})  false hits {false}/{len(neg)}"
    )


def report(title: str, scored: list[VerifiedPair], cosine: float, t: float | None) -> None:
    print(f"  {row(title, scored, cosine, t)}")


def by(scored: list[VerifiedPair], key: str) -> dict[str, list[VerifiedPair]]:
    out: dict[str, list[VerifiedPair]] = {}
    for s in scored:
        out.setdefault(getattr(s.pair, key), []).append(s)
    return dict(sorted(out.items()))


def verify_ms(pairs: Sequence[LabelledPair], scorer: CrossEncoderVerifier | None) -> str:
    """Median and p99 ms of the rules (+ one cross-encoder run) on one pair."""
    samples = []
    for p in pairs:
        t0 = time.perf_counter()
        verdict, _ = rule_verdict(p.a + " ", " " + p.b)
        if scorer is not None and verdict == "undecided":
            scorer.score([(p.a, p.b)])
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return (
        f"p50 {statistics.median(samples):.3f} ms, p99 {samples[int(0.99 * len(samples))]:.3f} ms"
    )


async def sweep(embedder: OnnxEmbedder, verifier: CrossEncoderVerifier, cosine: float) -> None:
    """Held-out and external results at each calibrated bound (reported, never chosen on)."""
    from routers.verifier.model import load_calibration

    scored = {
        part: await score_verifier_pairs(embedder, verifier.score, verifier_pairs(part))
        for part in ("heldout", "external")
    }
    await embedder.aclose()
    for point in load_calibration().points:
        print(f"max_wrong_rate {point.max_wrong_rate} (threshold {point.threshold:.4f})")
        report("heldout", scored["heldout"], cosine, point.threshold)
        for source, rows in by(scored["external"], "source").items():
            report(f"external {source}", rows, cosine, point.threshold)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=0.001)
    parser.add_argument("--cosine", type=float, default=0.85)
    parser.add_argument("--model", type=Path, default=MODEL_DIR)
    parser.add_argument("--detail", action="store_true", help="per kind / per source tables")
    parser.add_argument(
        "--sweep", action="store_true", help="only the cross-encoder, at every calibrated bound"
    )
    args = parser.parse_args()
    embedder = OnnxEmbedder()
    verifier = CrossEncoderVerifier(args.model)
    if args.sweep:
        await sweep(embedder, verifier, args.cosine)
        return
    parts = {part: verifier_pairs(part) for part in PARTS}
    cross = {
        part: await score_verifier_pairs(embedder, verifier.score, pairs)
        for part, pairs in parts.items()
        if part != "train"
    }
    vectors = {}
    for part, pairs in parts.items():
        a = await embedder.embed([p.a for p in pairs])
        b = await embedder.embed([p.b for p in pairs])
        vectors[part] = features(a, b)
    await embedder.aclose()
    from sklearn.linear_model import LogisticRegression

    head = LogisticRegression(C=1.0, max_iter=2000)
    head.fit(vectors["train"], [p.match for p in parts["train"]])
    candidates: dict[str, dict[str, list[VerifiedPair]]] = {"cross-encoder": cross}
    candidates["vector head"] = {
        part: with_probabilities(cross[part], head.predict_proba(vectors[part])[:, 1])
        for part in cross
    }
    candidates["cosine, calibrated"] = {
        part: with_probabilities(cross[part], [s.cosine for s in cross[part]]) for part in cross
    }
    thresholds: dict[str, float | None] = {"rules only": None}
    for name, scored in candidates.items():
        points = [p for p in calibrate(scored["calib"]) if p.max_wrong_rate <= args.rate]
        thresholds[name] = points[-1].threshold if points else None
        print(f"{name}: calibrated threshold for {args.rate}: {thresholds[name]}")
    candidates["rules only"] = cross
    print(f"\nat cosine >= {args.cosine}, max_wrong_rate {args.rate}:")
    for name in ("rules only", "cosine, calibrated", "vector head", "cross-encoder"):
        t = thresholds[name]
        print(f"{name} (threshold {t})")
        for part in ("calib", "heldout", "external"):
            report(part, candidates[name][part], args.cosine, t)
        if args.detail or name == "cross-encoder":
            for source, scored in by(candidates[name]["external"], "source").items():
                report(f"external {source}", scored, args.cosine, t)
    if args.detail:
        t = thresholds["cross-encoder"]
        print("\nheld-out per kind, cross-encoder:")
        for kind, scored in by(cross["heldout"], "kind").items():
            report(kind, scored, args.cosine, t)
    sample = parts["heldout"][:400] + parts["external"][:400]
    rows = vectors["heldout"][:400]
    head_ms = []
    for i in range(len(rows)):
        t0 = time.perf_counter()
        head.predict_proba(rows[i : i + 1])
        head_ms.append((time.perf_counter() - t0) * 1000)
    print(f"\nvector head alone per pair: p50 {statistics.median(head_ms):.3f} ms")
    print(f"verification per pair, rules only: {verify_ms(sample, None)}")
    print(f"verification per pair, rules + cross-encoder: {verify_ms(sample, verifier)}")


if __name__ == "__main__":
    asyncio.run(main())
