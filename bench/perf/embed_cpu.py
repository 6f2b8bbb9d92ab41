"""CPU time per embedding, stage by stage: robust to other processes' load, unlike req/s.

    python -m bench.perf.embed_cpu [--texts 400] [--variants a,b] [--json out.json]
                                   [--save-vectors v.npy]

Variants (interleaved in every round): the ONNX MiniLM, int8 (today's default) in an
embedder worker and in a thread, and fp32 in a worker; the static table distilled from
it (``routers/static_embedder.py``) in a worker, in the micro-batcher's thread, and
inline on the caller (its default with ``workers: 0``).

Short unique prompts (the shape ``bench/perf/overhead.py`` sends, ~25 tokens) and the
~200-token prompt of ``bench/perf/classify_latency.py``. For each variant it reports the
CPU milliseconds per text spent by this process (all its threads) and by the embedder
worker process, read from the kernel's per-process counters, at one text per call
(c1) and with 16 callers at once through the micro-batcher (c16).

``--save-vectors`` writes the short prompts' vectors; ``--compare`` reads such a file
and prints the lowest cosine against it (embeddings must not change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.loadgen import VOCABULARY
from bench.perf.classify_latency import PROMPT
from policies.routing_spec import ClassifierConfig
from routers.cpu import cpu_summary
from routers.embedding import SyncEmbedder
from routers.setup import serving_embedder

TICKS = os.sysconf("SC_CLK_TCK")
SHORT = "Summarise the benefits of connection pooling in two lines."


def short_prompts(n: int, seed: int) -> list[str]:
    """What the load generator sends with ``vary``: a base prompt plus 10 unique words."""
    out = []
    for i in range(n):
        k = (seed * 100_003 + i) * 2654435761 + 7
        words = []
        for _ in range(10):
            words.append(VOCABULARY[k % len(VOCABULARY)])
            k //= len(VOCABULARY)
            k += i * 40503
        out.append(f"{SHORT} Topic {seed}-{i}: {' '.join(words)}.")
    return out


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def worker_pids(embedder: Any) -> list[int]:
    inner = getattr(embedder, "inner", embedder)
    return list(getattr(inner, "pids", []))


async def run_calls(embedder: SyncEmbedder, texts: list[str], concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str) -> None:
        async with gate:
            await embedder.embed([text])

    started = time.perf_counter()
    await asyncio.gather(*(one(t) for t in texts))
    return time.perf_counter() - started


async def measure(
    spec: ClassifierConfig, texts: list[str], concurrency: int, inline: bool = True
) -> dict[str, float]:
    embedder = await asyncio.to_thread(serving_embedder, spec)
    if not inline:  # the static embedder's thread path, measured apart
        inner = getattr(embedder, "inner", embedder)
        inner.inline_chars = -1
    try:
        await run_calls(embedder, texts[:20], concurrency)  # warm-up (these repeat below)
        pids = worker_pids(embedder)
        body = texts[20:]
        own0, workers0 = time.process_time(), sum(proc_cpu_s(p) for p in pids)
        wall = await run_calls(embedder, body, concurrency)
        own = time.process_time() - own0
        workers = sum(proc_cpu_s(p) for p in pids) - workers0
    finally:
        await embedder.aclose()
    n = len(body)
    return {
        "gateway_cpu_ms": 1000 * own / n,
        "worker_cpu_ms": 1000 * workers / n,
        "total_cpu_ms": 1000 * (own + workers) / n,
        "wall_ms": 1000 * wall / n,
    }


def variants(threads: int | None) -> dict[str, tuple[ClassifierConfig, bool]]:
    """name → (spec, inline allowed)."""
    onnx = {"embedder": "onnx", "max_tokens": 128, "embedding_cache": 0, "threads": threads}
    static = {"embedder": "static", "max_tokens": 128, "embedding_cache": 0}
    return {
        "minilm-int8 worker": (ClassifierConfig(**onnx, quantize=True, workers=1), True),
        "minilm-int8 thread": (ClassifierConfig(**onnx, quantize=True, workers=0), True),
        "minilm-fp32 worker": (ClassifierConfig(**onnx, quantize=False, workers=1), True),
        "static worker": (ClassifierConfig(**static, workers=1), True),
        "static thread": (ClassifierConfig(**static, workers=0), False),
        "static inline": (ClassifierConfig(**static, workers=0), True),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=None, help="ClassifierConfig.threads")
    parser.add_argument("--variants", default="", help="comma-separated names (default: all)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--save-vectors", type=Path, default=None)
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    print(f"{cpu_summary()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    chosen = variants(args.threads)
    if args.variants:
        chosen = {k: v for k, v in chosen.items() if k in args.variants.split(",")}
    results: dict[str, list[dict[str, float]]] = {}
    for round_no in range(args.repeats):
        for name, (spec, inline) in chosen.items():
            for kind in ("short", "long"):
                for conc in (1, 16):
                    n = args.texts if kind == "short" else args.texts // 4
                    texts = (
                        short_prompts(n, round_no)
                        if kind == "short"
                        else [f"{PROMPT} #{round_no}-{i}" for i in range(n)]
                    )
                    key = f"{name} {kind} c{conc}"
                    r = await measure(spec, texts, conc, inline)
                    results.setdefault(key, []).append(r)
                    print(
                        f"round {round_no + 1} {key:28} gateway {r['gateway_cpu_ms']:6.2f} "
                        f"worker {r['worker_cpu_ms']:6.2f} total {r['total_cpu_ms']:6.2f} "
                        f"CPU ms/text, wall {r['wall_ms']:6.2f} ms/text",
                        flush=True,
                    )
    print("\nmedian [min-max] CPU ms per text: gateway, worker, total; wall ms per text")
    for key, runs in results.items():
        cells = []
        for field in ("gateway_cpu_ms", "worker_cpu_ms", "total_cpu_ms", "wall_ms"):
            values = [r[field] for r in runs]
            cells.append(f"{statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]")
        print(f"{key:28} " + "  ".join(cells))
    if args.save_vectors or args.compare:
        spec = variants(args.threads)["minilm-int8 thread"][0]
        embedder = await asyncio.to_thread(serving_embedder, spec)
        texts = short_prompts(64, 99) + [f"{PROMPT} #{i}" for i in range(16)]
        vectors = np.concatenate(
            [await embedder.embed([t]) for t in texts[:8]] + [await embedder.embed(texts[8:])]
        )
        await embedder.aclose()
        if args.save_vectors:
            np.save(args.save_vectors, vectors)
        if args.compare:
            before = np.load(args.compare)
            cosine = np.sum(before * vectors, axis=1)
            print(f"lowest cosine against {args.compare}: {cosine.min():.6f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
