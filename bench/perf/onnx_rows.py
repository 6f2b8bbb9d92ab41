"""What one ONNX Runtime run of the int8 embedder costs, and why texts run one at a time.

    python -m bench.perf.onnx_rows [--runs 200] [--json out.json]

For prompts of 3, 20, 30, 64 and 128 tokens it reports the CPU milliseconds per text of
the serving graph (``routers/onnx_embedder.py``) with one row per run, as served, and with
8 rows of the same length per run (no padding: the cheapest a batch can be), and the
lowest cosine between a text's vector embedded alone and embedded among 7 others. The
int8 graph quantises each MatMul's input with one scale for the whole tensor, so in a
batch a text's vector depends on which texts share its run; the embedder keeps one row
per run so that a text always gets the same vector (and the same score).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.harness.loadgen import VOCABULARY
from routers.onnx_embedder import OnnxEmbedder

TOKENS = (3, 20, 30, 64, 128)
ROWS = 8
CLS, SEP = 101, 102


def token_rows(embedder: OnnxEmbedder, tokens: int, count: int) -> npt.NDArray[np.int64]:
    """``count`` different word sequences, each exactly ``tokens`` wordpieces with its
    [CLS] and [SEP]."""
    rows = []
    for n in range(count):
        words = [VOCABULARY[(n * 7919 + 31 * i) % len(VOCABULARY)] for i in range(tokens)]
        ids = embedder._tokenizer.encode(" ".join(words)).ids[1:-1][: tokens - 2]
        rows.append([CLS, *ids, SEP])
    return np.asarray(rows, dtype=np.int64)


def run(embedder: OnnxEmbedder, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    out: npt.NDArray[np.float32] = embedder._session.run(None, feeds)[0]
    return out


def cpu_ms_per_text(embedder: OnnxEmbedder, ids: npt.NDArray[np.int64], rows: int) -> float:
    started = time.process_time()
    for start in range(0, len(ids), rows):
        run(embedder, ids[start : start + rows])
    return 1000 * (time.process_time() - started) / len(ids)


def measure(embedder: OnnxEmbedder, tokens: int, runs: int) -> dict[str, Any]:
    ids = token_rows(embedder, tokens, runs)
    cpu_ms_per_text(embedder, ids[:ROWS], 1)  # warm the arena for this shape
    alone = np.concatenate([run(embedder, ids[i : i + 1]) for i in range(ROWS)])
    together = run(embedder, ids[:ROWS])
    return {
        "tokens": tokens,
        "one_row_ms": cpu_ms_per_text(embedder, ids, 1),
        f"{ROWS}_rows_ms": cpu_ms_per_text(embedder, ids, ROWS),
        "lowest_cosine_alone_vs_batched": float(np.min(np.sum(alone * together, axis=1))),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200, help="texts per token count")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    embedder = OnnxEmbedder()
    try:
        results = [measure(embedder, tokens, max(args.runs, ROWS)) for tokens in TOKENS]
    finally:
        embedder.batcher.close()
    print(f"| tokens | CPU ms/text, 1 row a run | {ROWS} rows a run | cosine alone vs batched |")
    print("|---|---|---|---|")
    for r in results:
        print(
            f"| {r['tokens']} | {r['one_row_ms']:.2f} | {r[f'{ROWS}_rows_ms']:.2f} "
            f"| {r['lowest_cosine_alone_vs_batched']:.6f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
