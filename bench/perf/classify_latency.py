"""Classification latency and throughput, embedder variants side by side in one run.

    python -m bench.perf.classify_latency [--cores 2] [--requests 200] [--json out.json]

For each variant: p50/p99 of one request at a time (a ~200-token prompt, so the
truncation lever counts) and throughput with 64 concurrent requests going through the
micro-batcher. The torch embedder at 256 tokens (the old default) is the baseline the
ratios are taken against. Goals: p50 ≤ 15 ms, ≥ 100 classifications/s (issue 8);
p50 ≤ 10 ms at c=1 for this ~200-token prompt (issue 15). Every variant runs the model
in an embedder worker process (``workers: 1``) except ``-thread``, which keeps it in a
thread of this process. Prompts differ, so the LRU of repeated prompts never hits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from policies.routing_spec import ClassifierConfig
from routers.embedding import EmbeddingOnce
from routers.setup import build_routing

PROMPT = (
    "You are reviewing a pull request for a payment service. The change adds retries with "
    "exponential backoff to the client that calls the card processor, keeps an idempotency "
    "key per charge, and logs every attempt with the merchant id and the amount in cents. "
    "Explain which failure modes this handles, which it makes worse (think about duplicate "
    "charges when the processor times out after capturing the payment, about thundering "
    "herds when the processor recovers, and about log volume and personal data), and "
    "propose concrete changes to the design, with a short code sketch in Python showing the "
    "retry loop, the idempotency key handling and the circuit breaker. Keep the answer under "
    "four hundred words and use a numbered list for the proposals. Assume the service runs "
    "three replicas behind a load balancer, talks to the processor over HTTPS with a ten "
    "second timeout, and stores charges in PostgreSQL; say what changes if the processor "
    "starts returning HTTP 429 with a Retry-After header during a sale."
)
VARIANTS = {
    "torch-256": ClassifierConfig(embedder="sentence-transformers", max_tokens=256),
    "onnx-fp32-128": ClassifierConfig(embedder="onnx", quantize=False, max_tokens=128),
    "onnx-int8-128": ClassifierConfig(embedder="onnx", quantize=True, max_tokens=128),
    # Two intra-op threads (the default is one): lower latency on idle cores, more CPU.
    "onnx-int8-128-2threads": ClassifierConfig(
        embedder="onnx", quantize=True, max_tokens=128, threads=2
    ),
    # The same model in a thread of this process (the default before worker processes).
    "onnx-int8-128-thread": ClassifierConfig(
        embedder="onnx", quantize=True, max_tokens=128, workers=0
    ),
}


async def measure(name: str, spec: ClassifierConfig, requests: int) -> dict[str, float]:
    built = await asyncio.to_thread(build_routing, spec)
    classifier, embedder = built.classifier, built.embedder
    messages = [{"role": "user", "content": PROMPT}]

    async def one(text: str) -> float:
        started = time.perf_counter()
        await classifier.classify(messages, EmbeddingOnce(embedder, text))
        return time.perf_counter() - started

    for i in range(10):  # warm-up
        await one(PROMPT + str(i))
    singles = [await one(f"{PROMPT} #{i}") for i in range(requests)]
    gate = asyncio.Semaphore(64)

    async def limited(i: int) -> float:
        async with gate:
            return await one(f"{PROMPT} variant {i}")

    total = max(requests * 3, 640)
    started = time.perf_counter()
    await asyncio.gather(*(limited(i) for i in range(total)))
    elapsed = time.perf_counter() - started
    await embedder.aclose()
    singles.sort()
    return {
        "p50_ms": 1000 * statistics.median(singles),
        "p99_ms": 1000 * singles[min(len(singles) - 1, int(0.99 * len(singles)))],
        "min_ms": 1000 * singles[0],
        "max_ms": 1000 * singles[-1],
        "throughput_64": total / elapsed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", type=int, default=2, help="pin to this many CPUs (0: all)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from tokenizers import Tokenizer

    from routers.embedding import minilm_path

    tokenizer = Tokenizer.from_file(f"{minilm_path()}/tokenizer.json")
    tokenizer.no_truncation()
    tokens = len(tokenizer.encode(PROMPT).ids)
    print(f"prompt: {tokens} tokens; load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.cores:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    results = {}
    for name in args.variants.split(","):
        results[name] = await measure(name, VARIANTS[name], args.requests)
        r = results[name]
        print(
            f"{name:<15} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
            f"range {r['min_ms']:.1f}-{r['max_ms']:.1f} ms  @64: {r['throughput_64']:7.1f}/s",
            flush=True,
        )
    base = results.get("torch-256")
    if base:
        for name, r in results.items():
            print(
                f"{name:<15} p50 speed-up x{base['p50_ms'] / r['p50_ms']:.2f}  "
                f"throughput x{r['throughput_64'] / base['throughput_64']:.2f}"
            )
    if args.json:
        args.json.write_text(json.dumps({"cores": args.cores, "results": results}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
