"""Per-tier quality fitted on the embedded tiers' own answers to the FIT set.

The FIT records' grades become rows ``tiergate train-classifier --quality`` reads: the
prompt, ``scores`` (each tier's model by the name it answered under → 0/1) and ``group``
``live-<kind>``, so the model's out-of-family calibration holds whole kinds out. They are
fitted beside the vendored pool: the item function (a prompt's easiness) is learnt from
every labelled answer at once, and each of the three models gets its own head, which
``config/gateway.yaml`` names per tier (``routing.objective.reference``). Only FIT
prompts every tier answered are used; the held-out set is never read here.

Usage: ``python -m bench.live.quality`` (after ``bench.live.grade --set fit``) writes
``bench/live/data/fit-scores.jsonl`` and ``routers/model/quality.npz``; with
``--config config/examples/static-embedder.yaml --out routers/model/static/quality.npz``
the static embedder's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench.live.analyse import REPO, TIERS, records
from bench.live.sets import load

HERE = Path(__file__).resolve().parent
SCORES = HERE / "data" / "fit-scores.jsonl"


def rows() -> list[dict[str, object]]:
    items = {item["id"]: item for item in load("fit")}
    recs = records(HERE / "records", "fit")
    grades = json.loads((HERE / "grades" / "fit.json").read_text())
    out: list[dict[str, object]] = []
    for ident, item in items.items():
        answered = recs.get(ident, {})
        if not set(TIERS) <= set(answered) or any("model" not in answered[t] for t in TIERS):
            continue
        scores = {answered[t]["model"]: grades[ident][t] for t in TIERS}
        out.append(
            {
                "id": ident,
                "prompt": item["prompt"],
                "scores": scores,
                "label": 1 - grades[ident]["small"],
                "group": f"live-{item['kind']}",
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "routers" / "model" / "quality.npz")
    parser.add_argument("--config", type=Path, default=None, help="the embedder from this config")
    args = parser.parse_args()
    fitted = rows()
    SCORES.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fitted))
    print(f"{len(fitted)} FIT prompts answered by all three tiers -> {SCORES}", flush=True)
    command = [sys.executable, "-m", "gateway", "train-classifier", "--quality"]
    command += ["--data", str(SCORES), "--with-shared", "--out", str(args.out)]
    if args.config is not None:
        command += ["--config", str(args.config)]
    subprocess.run(command, cwd=REPO, check=True)


if __name__ == "__main__":
    main()
