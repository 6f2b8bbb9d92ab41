"""Write the verifier's calibration table: ``max_wrong_rate`` -> threshold.

    python -m routers.training.verifier_calibrate [--model routers/model/verifier]

Runs the cache's decision (the ONNX int8 MiniLM the gateway embeds with, the rules, the
cross-encoder) over the ``calib`` part only, and stores in the model's ``meta.json``,
per bound, the threshold, how many calibration near-misses it was measured on, the
calibration recall, and the 95 % upper bound of the rate actually seen; and, per source
of those near-misses (``by_source``), how many reached the verifier, how many each
bound's threshold accepts, and how many the rules accepted before any model ran (which
no bound covers). ``bounds`` says in words what the rate is a share of.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

from routers.training.verifier_eval import (
    CALIBRATION_COSINE,
    VerifiedPair,
    calibrate,
    score_verifier_pairs,
    upper_bound,
)
from routers.training.verifier_pairs import verifier_pairs
from routers.verifier.model import MODEL_DIR, CalibrationPoint, CrossEncoderVerifier

BOUNDS = (
    "max_wrong_rate R: at most a share R of the calibration near-misses that reach the "
    "learned verifier (cosine >= {cosine}, not decided by the rules) is accepted; "
    "calibration near-misses: by_source. Not bounded: near-misses the rules accept "
    "(rules_same), and other distributions of questions (docs/cache.md: external figure)."
)


def _source(pair: VerifiedPair) -> str:
    kind = pair.pair.kind
    return "project word order" if kind.startswith("wo_") else pair.pair.source


def by_source(
    scored: Sequence[VerifiedPair], points: Sequence[CalibrationPoint]
) -> dict[str, dict[str, object]]:
    """Per source of calibration near-misses: reached the verifier, accepted per bound,
    accepted by the rules alone."""
    out: dict[str, dict[str, object]] = {}
    for source in sorted({_source(p) for p in scored if not p.pair.match}):
        near = [p for p in scored if not p.pair.match and _source(p) == source]
        near = [p for p in near if p.cosine >= CALIBRATION_COSINE]
        reach = [p.probability or 0.0 for p in near if p.verdict == "undecided"]
        out[source] = {
            "negatives": len(reach),
            "wrong": {str(q.max_wrong_rate): sum(x >= q.threshold for x in reach) for q in points},
            "rules_same": sum(p.verdict == "same" for p in near),
        }
    return out


async def run(folder: Path) -> None:
    from routers.onnx_embedder import OnnxEmbedder

    embedder = OnnxEmbedder()
    verifier = CrossEncoderVerifier(folder)
    pairs = verifier_pairs("calib")
    scored = await score_verifier_pairs(embedder, verifier.score, pairs)
    await embedder.aclose()
    points = calibrate(scored)
    meta = json.loads((folder / "meta.json").read_text())
    meta["calibration"] = [
        {
            "max_wrong_rate": p.max_wrong_rate,
            "threshold": p.threshold,
            "negatives": p.negatives,
            "recall": round(p.recall, 4),
            "wrong": p.wrong,
            "upper_95": round(upper_bound(p.wrong, p.negatives), 5),
        }
        for p in points
    ]
    meta["calibration_pairs"] = len(pairs)
    meta["bounds"] = BOUNDS.format(cosine=CALIBRATION_COSINE)
    meta["by_source"] = by_source(scored, points)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    for row in meta["calibration"]:
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, default=MODEL_DIR)
    asyncio.run(run(parser.parse_args().model))


if __name__ == "__main__":
    main()
