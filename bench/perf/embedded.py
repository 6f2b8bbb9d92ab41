"""Startup time of `tiergate serve` and tokens/s of the embedded model at concurrency 1 and 8.

    .venv/bin/python -m bench.perf.embedded [--rounds 3] [--max-tokens 64]

Starts the gateway on config/gateway.yaml as a subprocess, times it to /readyz, then
streams chat completions through the official openai client and counts completion
tokens from the reported usage. Prints medians and ranges over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import openai

from tiergate_testing.gateways import GatewayProcess, subprocess_env

KEY = "bench-demo-key"
PROMPTS = [
    "Explain why the sky is blue.",
    "Write a short poem about rivers.",
    "List five uses of a paperclip.",
    "Describe how a bicycle works.",
    "What makes bread rise?",
    "Give tips for learning a language.",
    "Why do cats purr?",
    "Summarise the water cycle.",
]


def start_gateway(workdir: Path) -> tuple[GatewayProcess, float]:
    """``tiergate serve`` on its default config (config/gateway.yaml); seconds to /readyz."""
    gateway = GatewayProcess(None, workdir, env=subprocess_env(TIERGATE_DEMO_KEY=KEY))
    started = time.perf_counter()
    gateway.start(timeout_s=120)
    return gateway, time.perf_counter() - started


async def one(client: openai.AsyncOpenAI, prompt: str, max_tokens: int) -> int:
    stream = await client.chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0.7,
        seed=1,
        stream=True,
        # Past the prompt cache: a seeded request is cacheable, and prompts repeat.
        extra_headers={"Cache-Control": "no-cache, no-store"},
        stream_options={"include_usage": True},
    )
    tokens = 0
    async for event in stream:
        if event.usage is not None:
            tokens = event.usage.completion_tokens
    return tokens


async def tokens_per_second(base: str, concurrency: int, max_tokens: int) -> float:
    client = openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=300)
    started = time.perf_counter()
    counts = await asyncio.gather(
        *(one(client, PROMPTS[i % len(PROMPTS)], max_tokens) for i in range(concurrency))
    )
    elapsed = time.perf_counter() - started
    await client.close()
    return sum(counts) / elapsed


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.1f} (range {min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    startups: list[float] = []
    results: dict[int, list[float]] = {1: [], 8: []}
    with tempfile.TemporaryDirectory(prefix="tg-embedded-") as scratch:
        for _ in range(args.rounds):
            gateway, startup = start_gateway(Path(scratch))
            startups.append(startup)
            try:
                base = gateway.api_url
                asyncio.run(tokens_per_second(base, 1, 8))  # warm-up
                for concurrency in results:
                    results[concurrency].append(
                        asyncio.run(tokens_per_second(base, concurrency, args.max_tokens))
                    )
            finally:
                gateway.stop(timeout_s=30)
    print(f"startup to /readyz (s): {summary(startups)}")
    for concurrency, values in results.items():
        print(f"tokens/s at concurrency {concurrency}: {summary(values)}")


if __name__ == "__main__":
    main()
