"""Interactive latency with and without a big batch running, on engines of fixed capacity.

    python -m bench.perf.batch_priority [--repeats 3] [--seconds 8] [--lines 10000]

Two fake engines (``backends/fake.py``) of ``--slots`` slots each (the replica's
``max_inflight`` and the engine's ``max_running``) and a fixed per-token delay, one
``EnginePool`` over them, driven directly (not through HTTP: on a 2-core box the gateway's
own CPU would be the bottleneck, not the slots). Interactive requests arrive open-loop
(Poisson, one seeded schedule for every scenario) at ``--load`` of the pool's capacity for
``--seconds``; their latency counts from the scheduled arrival. The batch is a queue of
``--lines`` lines worked by as many workers as the pool has slots (the batch runner's
``concurrency``), stopped when the interactive window ends. Scenarios, in one process:

  alone      interactive only (the baseline of every ratio)
  off        + the batch as interactive requests (no priority class)
  finish     + the batch at ``batch`` priority, share 0.5, never preempted (lines finish)
  at_once    + at ``batch`` priority, share 0.5, preempted as soon as interactive waits
  default    + at ``batch`` priority, the defaults: share 0.5, preempted after 20 ms
  share1     + at ``batch`` priority, share 1.0, preempted after 20 ms

Reported per scenario: interactive p50/p99 latency and TTFT and their ratios to
``alone``; the share of the idle slot-time (slots x window - interactive slot-time) that
finished batch lines used, and the share preempted tries wasted; batch lines/s. Last, the
batch alone on a 0 ms engine: lines/s through the pool at batch priority and as
interactive (the cost of the priority class's bookkeeping).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from backends.base import Chunk, Engine, EngineLoad, GenerationRequest, Priority, SamplingParams
from backends.fake import FakeEngine
from backends.pool import EnginePool, PoolSettings, Replica


@dataclass(slots=True)
class Tally:
    """Engine slot-time inside the window, by class: (start, end) of every engine stream."""

    window: tuple[float, float] = (0.0, 0.0)
    interactive: float = 0.0
    batch_done: float = 0.0
    batch_lost: float = 0.0

    def add(self, kind: str, start: float, end: float, finished: bool) -> None:
        low, high = self.window
        inside = max(0.0, min(end, high) - max(start, low))
        if kind == "i":
            self.interactive += inside
        elif finished:
            self.batch_done += inside
        else:
            self.batch_lost += inside


class Timed:
    """An engine, tallying the slot-time each request held it."""

    def __init__(self, engine: Engine, tally: Tally) -> None:
        self.engine, self.tally = engine, tally
        self.name, self.model = engine.name, engine.model
        self.counters, self.capabilities = engine.counters, engine.capabilities

    def load(self) -> EngineLoad:
        return self.engine.load()

    async def start(self) -> None:
        await self.engine.start()

    async def aclose(self) -> None:
        await self.engine.aclose()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        start, finished = time.monotonic(), False
        try:
            async for chunk in self.engine.stream(request):
                yield chunk
            finished = True
        finally:
            self.tally.add(request.request_id[0], start, time.monotonic(), finished)


@dataclass(slots=True)
class Result:
    latency: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    batch_lines: int = 0
    tally: Tally = field(default_factory=Tally)
    preempted: int = 0


def request(kind: str, tokens: int) -> GenerationRequest:
    """``kind`` ("i" or "b") starts the id: the tally reads the class from it."""
    words = " ".join(uuid.uuid4().hex[:4] for _ in range(4))
    return GenerationRequest(
        request_id=f"{kind}{uuid.uuid4().hex}",
        model="bench",
        sampling=SamplingParams(max_tokens=tokens, temperature=0.0),
        messages=({"role": "user", "content": f"Write a long story about {words}."},),
    )


def fake(args: argparse.Namespace, index: int, delay: float) -> Engine:
    return FakeEngine(
        name=f"fake-{index}",
        model="bench",
        tokens=args.tokens,
        token_delay_s=delay,
        max_running=args.slots,
    )


def build(
    args: argparse.Namespace, engines: list[Engine], tally: Tally, **settings: object
) -> EnginePool:
    replicas = [Replica(Timed(engine, tally), max_inflight=args.slots) for engine in engines]
    return EnginePool("bench", replicas, PoolSettings(**settings))  # type: ignore[arg-type]


async def interactive(pool: EnginePool, due: float, tokens: int, result: Result) -> None:
    first = None
    async for _ in pool.stream(request("i", tokens)):
        first = first or time.monotonic()
    end = time.monotonic()
    result.latency.append(end - due)
    result.ttft.append((first or end) - due)


async def batch_worker(
    pool: EnginePool, lines: list[int], priority: Priority, tokens: int, result: Result
) -> None:
    while lines:
        lines.pop()
        async for _ in pool.stream(request("b", tokens), priority=priority):
            pass
        result.batch_lines += 1


async def scenario(
    args: argparse.Namespace,
    engines: list[Engine],
    arrivals: list[float],
    batch: Priority | None,
    **settings: object,
) -> Result:
    result = Result()
    pool = build(args, engines, result.tally, **settings)
    workers = []
    if batch is not None:
        lines = list(range(args.lines))
        workers = [
            asyncio.create_task(batch_worker(pool, lines, batch, args.tokens, result))
            for _ in range(args.replicas * args.slots)
        ]
        await asyncio.sleep(1.0)  # the batch fills the pool before the window opens
    start, before = time.monotonic(), result.batch_lines
    result.tally.window = (start, start + args.seconds)
    asks = []
    for offset in arrivals:
        await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
        asks.append(asyncio.create_task(interactive(pool, start + offset, args.tokens, result)))
    await asyncio.sleep(max(0.0, start + args.seconds - time.monotonic()))
    done_in_window = result.batch_lines - before
    for worker in workers:
        worker.cancel()
    await asyncio.gather(*asks, *workers, return_exceptions=True)
    result.batch_lines = done_in_window
    result.preempted = pool.counters.preempted
    assert all(r.inflight == 0 for r in pool.replicas)
    return result


async def throughput(args: argparse.Namespace, priority: Priority) -> float:
    """Lines/s of the whole batch on a 0 ms engine, nothing else running."""
    result = Result()
    engines = [fake(args, i, 0.0) for i in range(args.replicas)]
    pool = build(args, engines, result.tally, batch_share=1.0)
    lines = list(range(args.lines))
    started = time.monotonic()
    await asyncio.gather(
        *(
            batch_worker(pool, lines, priority, args.tokens, result)
            for _ in range(args.replicas * args.slots)
        )
    )
    return result.batch_lines / (time.monotonic() - started)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


SCENARIOS: dict[str, tuple[Priority | None, dict[str, object]]] = {
    "alone": (None, {}),
    "off": ("interactive", {}),
    "finish": ("batch", {"preempt_after_s": None}),
    "at_once": ("batch", {"preempt_after_s": 0.0}),
    "default": ("batch", {}),
    "share1": ("batch", {"batch_share": 1.0}),
}


def spread(values: list[float], fmt: str) -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


async def engines_of(args: argparse.Namespace) -> tuple[list[Engine], float]:
    """The replicas' engines and the seconds one request takes on one alone."""
    if not args.llamacpp:
        engines = [fake(args, i, args.token_delay_ms / 1000) for i in range(args.replicas)]
        return engines, args.tokens * args.token_delay_ms / 1000
    from backends.llamacpp import LlamaCppEngine
    from tiergate_testing.configs import SMOLLM2

    engines = [
        LlamaCppEngine(name=f"llama-{i}", model="bench", model_path=SMOLLM2, n_threads=1)
        for i in range(args.replicas)
    ]
    for engine in engines:
        await engine.start()
    times = []
    for _ in range(5):
        started = time.monotonic()
        async for _ in engines[0].stream(request("i", args.tokens)):
            pass
        times.append(time.monotonic() - started)
    return engines, statistics.median(times)


async def run(args: argparse.Namespace) -> None:
    engines, line_s = await engines_of(args)
    capacity = args.replicas * args.slots / line_s
    rng = random.Random(args.seed)
    arrivals, at = [], 0.0
    while True:
        at += rng.expovariate(args.load * capacity)
        if at >= args.seconds:
            break
        arrivals.append(at)
    print(
        f"{args.replicas} {'llama.cpp SmolLM2-135M' if args.llamacpp else 'fake'} replicas x "
        f"{args.slots} slots, {args.tokens} tokens: {line_s * 1000:.0f} ms a request; capacity "
        f"{capacity:.0f}/s; interactive {len(arrivals)} at {args.load:.0%} over {args.seconds} s; "
        f"batch {args.lines} lines; load avg {os.getloadavg()[0]:.2f}"
    )
    rows: dict[str, dict[str, list[float]]] = {name: {} for name in SCENARIOS}
    for repeat in range(args.repeats):
        results = {}
        for name, (priority, settings) in SCENARIOS.items():
            results[name] = await scenario(args, engines, arrivals, priority, **settings)
        base = results["alone"]
        for name, res in results.items():
            idle = args.replicas * args.slots * args.seconds - res.tally.interactive
            figures = {
                "p50": pct(res.latency, 50) / pct(base.latency, 50),
                "p99": pct(res.latency, 99) / pct(base.latency, 99),
                "ttft50": pct(res.ttft, 50) / pct(base.ttft, 50),
                "ttft99": pct(res.ttft, 99) / pct(base.ttft, 99),
                "p99_ms": pct(res.latency, 99) * 1000,
                "ttft_ms": pct(res.ttft, 50) * 1000,
                "used": res.tally.batch_done / idle,
                "lost": res.tally.batch_lost / idle,
                "lines_s": res.batch_lines / args.seconds,
                "preempted": float(res.preempted),
            }
            for key, value in figures.items():
                rows[name].setdefault(key, []).append(value)
        print(f"repeat {repeat + 1}: load avg {os.getloadavg()[0]:.2f}")
    print(
        f"{'scenario':9} {'p50 x':>18} {'p99 x':>18} {'TTFT p50 x':>18} {'TTFT p99 x':>18} "
        f"{'p99 ms':>18} {'TTFT p50 ms':>18} {'idle used':>18} {'idle lost':>18} "
        f"{'lines/s':>18} {'preempted':>18}"
    )
    for name, row in rows.items():
        print(
            f"{name:9} {spread(row['p50'], '.2f'):>18} {spread(row['p99'], '.2f'):>18} "
            f"{spread(row['ttft50'], '.2f'):>18} {spread(row['ttft99'], '.2f'):>18} "
            f"{spread(row['p99_ms'], '.0f'):>18} {spread(row['ttft_ms'], '.0f'):>18} "
            f"{spread(row['used'], '.0%'):>18} "
            f"{spread(row['lost'], '.0%'):>18} {spread(row['lines_s'], '.0f'):>18} "
            f"{spread(row['preempted'], '.0f'):>18}"
        )
    for engine in engines:
        await engine.aclose()
    if args.llamacpp:
        return
    kinds: tuple[Priority, ...] = ("batch", "interactive")
    for kind in kinds:
        rates = [await throughput(args, kind) for _ in range(args.repeats)]
        print(f"0 ms engine, {args.lines} lines as {kind}: {spread(rates, ',.0f')} lines/s")
    print(f"load avg at the end {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=10)
    parser.add_argument("--token-delay-ms", type=float, default=10.0)
    parser.add_argument("--load", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--llamacpp", action="store_true", help="SmolLM2 on llama.cpp, 1 slot")
    args = parser.parse_args()
    if args.llamacpp:
        args.slots = 1  # one request at a time per model
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
