"""The client's CPU per Redis command, three ways, on one private redis-server.

    python -m bench.perf.redis_client [--turns 3000] [--per-turn 8] [--rounds 5]

Each turn issues ``--per-turn`` single commands of the kinds a gateway request sends (a
hash read, a multi-field read, a short write with a TTL, a script, a float increment,
a stream append...) from concurrent callers in one turn of the event loop, and waits
for all their replies; the three ways alternate in every round:

* ``one by one``: a plain ``redis.asyncio.Redis`` (``redis_pipelining: false``): each
  command its own pool checkout, retry wrapper, timed read and round trip;
* ``redis-py pipeline``: the turn's commands in one ``pipeline(transaction=False)``, as
  ``CoalescingRedis`` sent them before it packed commands itself;
* ``CoalescingRedis``: what the gateway runs (``policies/stores/redis_coalesce.py``).

and, as the floor the first and the last share, ``callers alone``: the same concurrent
callers gathered with no Redis behind them (in the gateway each request is a task of its
own already). Reports this process's CPU microseconds per command
(``time.process_time``), median [min-max] over rounds, and each way's cost above that
floor; the server's CPU is not in it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench.harness import targets
from policies.stores.redis_coalesce import CoalescingRedis

SCRIPT = "return redis.call('HGET', KEYS[1], ARGV[1])"


def commands(n: int, sha: str) -> list[tuple[Any, ...]]:
    kinds: list[tuple[Any, ...]] = [
        ("HGET", "bench:h", "a"),
        ("HMGET", "bench:h", "a", "b"),
        ("HGETALL", "bench:h"),
        ("SET", "bench:s", b"v" * 200, "PX", 60_000),
        ("EVALSHA", sha, 1, "bench:h", "b"),
        ("HINCRBYFLOAT", "bench:f", "usd", 0.25),
        ("XADD", "bench:x", "MAXLEN", "~", 1000, "*", "op", "add", "d", "0123456789abcdef"),
        ("GET", "bench:missing"),
    ]
    return [kinds[i % len(kinds)] for i in range(n)]


def singles(client: aioredis.Redis, turn: list[tuple[Any, ...]]) -> Awaitable[Any]:
    """Every command on its own, from concurrent callers in one turn."""
    return asyncio.gather(*(client.execute_command(*c) for c in turn))  # type: ignore[no-untyped-call]


async def _nothing(*_command: Any) -> None:
    return None


def callers_alone(_client: aioredis.Redis, turn: list[tuple[Any, ...]]) -> Awaitable[Any]:
    return asyncio.gather(*(_nothing(*c) for c in turn))


async def redis_py_pipeline(client: aioredis.Redis, turn: list[tuple[Any, ...]]) -> Any:
    async with client.pipeline(transaction=False) as pipe:
        for command in turn:
            pipe.execute_command(*command)
        return await pipe.execute(raise_on_error=False)


async def timed(
    way: Callable[[aioredis.Redis, list[tuple[Any, ...]]], Awaitable[Any]],
    client: aioredis.Redis,
    turn: list[tuple[Any, ...]],
    turns: int,
) -> float:
    """Microseconds of this process's CPU per command."""
    await way(client, turn)  # warm: connections open, script loaded
    started = time.process_time()
    for _ in range(turns):
        await way(client, turn)
    return 1e6 * (time.process_time() - started) / (turns * len(turn))


async def run(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    def pool() -> aioredis.BlockingConnectionPool:
        return aioredis.BlockingConnectionPool.from_url(
            url, max_connections=16, timeout=1.0, socket_timeout=1.0, health_check_interval=30
        )

    plain = aioredis.Redis(connection_pool=pool())
    coalescing = CoalescingRedis(connection_pool=pool())
    await plain.hset("bench:h", mapping={"a": "1", "b": "2"})
    sha = await plain.script_load(SCRIPT)
    turn = commands(args.per_turn, sha)
    ways = {
        "callers alone": (callers_alone, plain),
        "one by one": (singles, plain),
        "redis-py pipeline": (redis_py_pipeline, plain),
        "CoalescingRedis": (singles, coalescing),
    }
    results: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for round_no in range(args.rounds):
            for name, (way, client) in ways.items():
                micros = await timed(way, client, turn, args.turns)
                results[name].append(micros)
                print(
                    f"round {round_no + 1} {name:18} {micros:6.1f} µs CPU per command", flush=True
                )
    finally:
        await plain.aclose()
        await coalescing.aclose()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--per-turn", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server, url = targets.start_private_redis(Path(folder))
        try:
            results = asyncio.run(run(url, args))
        finally:
            server.terminate()
            server.wait(10)
    floor = statistics.median(results.pop("callers alone"))
    base = statistics.median(results["one by one"]) - floor
    print(f"\nclient CPU per command, {args.per_turn} commands a turn, median [min-max]")
    print(f"(callers alone, no Redis: {floor:.1f} µs per command; 'above' subtracts it):")
    print("| | µs per command | above the callers | vs one by one |\n|---|---|---|---|")
    for name, values in results.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.1f} [{min(values):.1f}-{max(values):.1f}] | "
            f"{median - floor:.1f} | {(median - floor) / base:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
