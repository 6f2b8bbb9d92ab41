"""Write the verifier's calibration table: ``max_wrong_rate`` -> threshold.

    python -m routers.training.verifier_calibrate [--model routers/model/verifier]

Runs the cache's decision (the ONNX int8 MiniLM the gateway embeds with, the rules, the
cross-encoder) over the ``calib`` part only, and stores in the model's ``meta.json``,
per bound, the threshold, how many calibration near-misses it was measured on, the
calibration recall, and the 95 % upper bound of the rate actually seen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from routers.training.verifier_eval import calibrate, score_verifier_pairs, upper_bound
from routers.training.verifier_pairs import verifier_pairs
from routers.verifier.model import MODEL_DIR, CrossEncoderVerifier


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
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    for row in meta["calibration"]:
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, default=MODEL_DIR)
    asyncio.run(run(parser.parse_args().model))


if __name__ == "__main__":
    main()
