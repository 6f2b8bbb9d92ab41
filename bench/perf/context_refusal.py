"""Engine time of a prompt over the context on the embedded llama.cpp model, with and
without the token lower bound (``backends.token_bound``), and the gateway's answer time.

    .venv/bin/python -m bench.perf.context_refusal [--rounds 5] [--megabytes 3]

Engine: one ``LlamaCppEngine`` (SmolLM2-135M, n_ctx 2048) in this process; each round
times ``stream()`` of a chat request with a prompt of ``--megabytes`` MB, from the call
to the context error, first with the bound (what the engine does), then with it switched
off (the exact check alone: what it did before, tokenising the whole prompt). Gateway:
``tiergate serve`` on that model, the same prompt through the official openai client,
and how long a small request sent at the same time takes. Medians and ranges.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import openai

from backends.base import GenerationRequest, SamplingParams
from backends.errors import ContextExceeded
from backends.llamacpp import LlamaCppEngine
from tiergate_testing.configs import SMOLLM2, TEST_KEY, smollm2_config
from tiergate_testing.gateways import GatewayProcess, subprocess_env

WORDS = "the quick brown fox jumps over a lazy dog while 3.14 apples fall "


def big_prompt(megabytes: float) -> str:
    size = int(megabytes * 1_000_000)
    return (WORDS * (size // len(WORDS) + 1))[:size]


def request(prompt: str) -> GenerationRequest:
    messages = ({"role": "user", "content": prompt},)
    return GenerationRequest("bench", "m", SamplingParams(max_tokens=8), messages=messages)


async def refusal_s(engine: LlamaCppEngine, prompt: str) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        async for _ in engine.stream(request(prompt)):
            pass
    except ContextExceeded as exc:
        return time.perf_counter() - started, str(exc)
    raise AssertionError("the prompt was not refused")


async def engine_rounds(rounds: int, prompt: str) -> dict[str, list[float]]:
    engine = LlamaCppEngine(
        name="bench", model="smollm2", model_path=SMOLLM2, n_ctx=2048, n_threads=1
    )
    loaded = time.perf_counter()
    await engine.start()
    print(f"model load with the vocabulary pass: {time.perf_counter() - loaded:.2f}s")
    bound = engine._token_bytes
    times: dict[str, list[float]] = {"with the bound": [], "exact check only": []}
    try:
        for _ in range(rounds):
            engine._token_bytes = bound
            took, said = await refusal_s(engine, prompt)
            times["with the bound"].append(took)
            engine._token_bytes = None  # as before: tokenise, then compare
            took, said_exact = await refusal_s(engine, prompt)
            times["exact check only"].append(took)
        print(f"  with the bound: {said}\n  exact: {said_exact}")
    finally:
        await engine.aclose()
    return times


async def gateway_rounds(
    rounds: int, prompt: str, default_config: bool = False
) -> dict[str, list[float]]:
    """``default_config``: ``tiergate serve`` on config/gateway.yaml (``auto``: the
    classifier and the semantic cache embed the prompt first), else one replica, a
    named tier, no embedder."""
    config = None if default_config else smollm2_config(replicas=1)
    model = "auto" if default_config else "small"
    times: dict[str, list[float]] = {"3 MB request to its 400": [], "small request beside it": []}
    with tempfile.TemporaryDirectory(prefix="tg-context-") as scratch:
        env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_DEMO_KEY=TEST_KEY)
        with GatewayProcess(config, Path(scratch), env=env) as gateway:
            client = openai.AsyncOpenAI(
                base_url=gateway.api_url, api_key=TEST_KEY, max_retries=0, timeout=120
            )

            async def big() -> float:
                started = time.perf_counter()
                try:
                    await client.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": prompt}]
                    )
                except openai.BadRequestError as exc:
                    assert exc.code == "context_length_exceeded", exc
                    return time.perf_counter() - started
                raise AssertionError("not refused")

            async def small() -> float:
                await asyncio.sleep(0.05)  # sent while the big one is in flight
                started = time.perf_counter()
                await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": "Say hi."}],
                    max_tokens=4,
                    extra_headers={"Cache-Control": "no-cache, no-store"},
                )
                return time.perf_counter() - started

            await small()  # warm-up: the model's first decode
            for _ in range(rounds):
                took_big, took_small = await asyncio.gather(big(), small())
                times["3 MB request to its 400"].append(took_big)
                times["small request beside it"].append(took_small)
            await client.close()
    return times


def summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.1f} ms "
        f"(range {min(values) * 1000:.1f}-{max(values) * 1000:.1f}, n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--megabytes", type=float, default=3.0)
    parser.add_argument("--no-gateway", action="store_true")
    parser.add_argument("--no-engine", action="store_true")
    parser.add_argument(
        "--default-config",
        action="store_true",
        help="the gateway on config/gateway.yaml with model auto (classifier, semantic cache)",
    )
    args = parser.parse_args()
    prompt = big_prompt(args.megabytes)
    if not args.no_engine:
        print(f"engine time of a {args.megabytes:g} MB prompt (SmolLM2-135M, n_ctx 2048):")
        for name, values in asyncio.run(engine_rounds(args.rounds, prompt)).items():
            print(f"  {name}: {summary(values)}")
    if not args.no_gateway:
        where = "config/gateway.yaml, model auto" if args.default_config else "one replica"
        print(f"through tiergate serve ({where}):")
        rounds = gateway_rounds(args.rounds, prompt, args.default_config)
        for name, values in asyncio.run(rounds).items():
            print(f"  {name}: {summary(values)}")


if __name__ == "__main__":
    main()
