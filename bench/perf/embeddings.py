"""``POST /v1/embeddings`` through the gateway vs the same embedder called directly.

    python -m bench.perf.embeddings [--requests 200] [--concurrency 8] [--rounds 3]
    tiergate bench embeddings -- --rounds 5

One real gateway (uvicorn on loopback, the classifier's MiniLM shared as the served
embedder, budgets and ledger in process); each round sends ``--requests`` one-text
requests at ``--concurrency`` with httpx, then awaits as many ``embedder.embed([text])``
calls at the same concurrency on the gateway's own loop (the baseline: no HTTP, no auth,
no admission). Every text is new (no LRU hit on either side). Reports requests/s of each,
and the ratio gateway/direct: median and range over rounds, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway

MODEL = "all-minilm-l6-v2"


def config() -> dict[str, Any]:
    built = fake_config()
    built["routing"] = {"classifier": {"max_wait_ms": 2}}
    built["embeddings"] = {MODEL: {}}
    built["prices"][MODEL] = {"input": 0.005, "output": 0}
    return built


async def _paced(count: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> float:
    """Requests per second of ``count`` calls, ``concurrency`` at a time."""
    queue = iter(range(count))

    async def worker() -> None:
        for i in queue:
            await one(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - started)


async def through_gateway(base_url: str, count: int, concurrency: int, tag: str) -> float:
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as client:

        async def one(i: int) -> None:
            body = {"model": MODEL, "input": f"gateway {tag} request number {i} about cats"}
            answer = await client.post("/v1/embeddings", json=body)
            answer.raise_for_status()

        return await _paced(count, concurrency, one)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    rows: list[tuple[float, float]] = []
    with running_gateway(config()) as gateway:
        served = gateway.state.parts.served_embedder
        assert served is not None, "the in-process embedder did not start"
        embedder = served.embedder

        async def direct(tag: str) -> float:
            async def one(i: int) -> None:
                await embedder.embed([f"direct {tag} request number {i} about cats"])

            return await _paced(args.requests, args.concurrency, one)

        asyncio.run(through_gateway(gateway.base_url, 20, 4, "warm"))
        for r in range(args.rounds):
            tag = f"r{r}-{time.time_ns()}"
            via = asyncio.run(
                through_gateway(gateway.base_url, args.requests, args.concurrency, tag)
            )
            base = gateway.call(direct(tag), timeout=600)
            rows.append((via, base))
            print(f"round {r}: gateway {via:.0f} req/s, direct {base:.0f} req/s")
    ratios = [v / b for v, b in rows]
    for name, values in (
        ("gateway req/s", [v for v, _ in rows]),
        ("direct req/s", [b for _, b in rows]),
        ("gateway/direct", ratios),
    ):
        print(
            f"{name}: median {statistics.median(values):.3f} "
            f"(range {min(values):.3f}-{max(values):.3f})"
        )


if __name__ == "__main__":
    main()
