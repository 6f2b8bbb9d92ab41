"""Rebuild ``data/routing/pool.csv.gz`` from the shared routing pool (stdlib only).

    python -m routers.training.corpora.routing_pool /path/to/shared/data/routing

Keeps the columns the classifier uses: the tier models' correctness, the lowest tier that
answered, GSM8K-train calculation steps, and three additions: ``fail_rate`` (the share of
every model the pool scored on that prompt that got it wrong, a less noisy difficulty than
one model's 0/1) with ``models`` (how many), the RouterBench rows' per-tier cost in USD, and
``scores``: every model's correctness on the prompt by model name (compact JSON), which the
per-tier quality model (``routers/training/quality_fit.py``) fits its item-response model on.
The output is byte-identical for the same input (gzip without a timestamp).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "data"  # the checkout's data/ folder
OUT = DATA / "routing" / "pool.csv.gz"
COLUMNS = (
    "source",
    "benchmark",
    "item_id",
    "prompt",
    "cheap",
    "medium",
    "expensive",
    "tier_min",
    "steps",
    "fail_rate",
    "models",
    "cost_cheap",
    "cost_medium",
    "cost_expensive",
    "scores",
)
# Columns holding one model's correctness; cheap/expensive duplicate two of LLMRouter's.
_TIER_SCORES = ("cheap_score", "medium_score", "expensive_score", "gpt-3.5-turbo-1106_score")
_STEP = re.compile(r"<<[^>]*>>")
# RouterBench's columns by the model each stands for (the pool names them by tier).
ROUTERBENCH_MODELS = {
    "cheap_score": "mistral-7b-instruct",
    "medium_score": "mixtral-8x7b-instruct",
    "expensive_score": "gpt-4-1106-preview",
    "gpt-3.5-turbo-1106_score": "gpt-3.5-turbo-1106",
}


def _named_scores(row: dict[str, str]) -> str:
    """Each scored model's correctness, by model name, as compact JSON ("" when none)."""
    if row["tier_min"] == "":
        return ""
    if row["source"].startswith("RouterDC"):
        named = {ROUTERBENCH_MODELS[k]: row[k] for k in _TIER_SCORES}
    else:
        named = {
            k.removesuffix("_score"): row[k]
            for k in row
            if k.endswith("_score") and k not in _TIER_SCORES
        }
    kept = {name: float(value) for name, value in sorted(named.items()) if value != ""}
    return json.dumps(kept, separators=(",", ":")) if kept else ""


def _model_scores(row: dict[str, str]) -> list[float]:
    named = [k for k in row if k.endswith("_score") and k not in _TIER_SCORES]
    if row["source"].startswith("RouterDC"):
        named = list(_TIER_SCORES)
    return [float(row[k]) for k in named if row.get(k, "") != ""]


def build(shared: Path) -> bytes:
    with (shared / "gsm8k_train_solutions.csv").open(newline="", encoding="utf-8") as handle:
        solutions = {r["prompt"]: r["reference_solution"] for r in csv.DictReader(handle)}
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
    writer.writeheader()
    with (shared / "train_pool.csv").open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            scores = _model_scores(row) if row["tier_min"] != "" else []
            solution = solutions.get(row["prompt"]) if row["tier_min"] == "" else None
            writer.writerow(
                {
                    "source": row["source"],
                    "benchmark": row["benchmark"],
                    "item_id": row["item_id"],
                    "prompt": row["prompt"],
                    "cheap": row["cheap_score"],
                    "medium": row["medium_score"],
                    "expensive": row["expensive_score"],
                    "tier_min": row["tier_min"],
                    "steps": "" if solution is None else len(_STEP.findall(solution)),
                    "fail_rate": f"{1 - sum(scores) / len(scores):.4f}" if scores else "",
                    "models": len(scores) or "",
                    "cost_cheap": row["cheap_cost_usd"],
                    "cost_medium": row["medium_cost_usd"],
                    "cost_expensive": row["expensive_cost_usd"],
                    "scores": _named_scores(row),
                }
            )
    return gzip.compress(text.getvalue().encode("utf-8"), compresslevel=9, mtime=0)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    OUT.write_bytes(build(Path(argv[1])))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
