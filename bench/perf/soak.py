"""Soak: requests/s, gateway RSS and Redis memory over a long run, single-process and Redis.

    python -m bench.perf.soak                          # 200,000 requests per mode, both modes
    python -m bench.perf.soak --requests 30000 --mode memory     # a quick look
    python -m bench.perf.soak --engine both --mode memory        # passthrough, then fake engine

A local OpenAI-compatible upstream stands in for the engine (its own process, so its
memory is not the gateway's); with ``--engine fake`` the gateway's own protocol fake
(``backends/fake.py``, in the gateway process: its memory is counted) answers instead.
tiergate passes through to it with the per-request state
switched on: a tenant budget and a key budget (reserve + settle + ledger event), a
rate limit, and the exact cache (every prompt is new, so every request stores an
entry). Redis mode runs a private ``redis-server`` on a free loopback port, so its
``used_memory`` is this run's alone.

``--semantic`` also stores every answer in the semantic cache (the sentence embedder runs
in the gateway; on Redis 7 each replica keeps the stream index in memory), with entries
living ``--cache-ttl-s``; ``--idle-every N --idle-s S`` stops the load for S seconds every
N requests, so the tenant's whole cache lapses in Redis without any eviction event (what
the stream index must notice on its own).

Every ``--sample-every`` requests it records the gateway's RSS (whole process tree),
Redis ``used_memory`` and key count, and the requests/s of the interval. The summary's
growth per request is the least-squares slope of RSS (and Redis memory) against
requests after ``--warmup`` requests, in bytes; flat means a few bytes per request at
most, where a leak of one event per request shows as hundreds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import targets
from bench.harness.loadgen import Runner
from bench.harness.targets import Process

ARTIFACTS = targets.REPO / "artifacts" / "soak"
STREAM_EVENTS = 20_000
RESERVATION_TTL_S = 30.0


@dataclass(frozen=True, slots=True)
class Sample:
    requests: int
    elapsed_s: float
    rps: float  # over the interval since the previous sample
    rss_mb: float
    redis_mb: float | None
    redis_keys: int | None


def rss_mb(process: Process) -> float:
    total = 0
    for pid in process.tree():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


class PrivateRedis:
    """A redis-server of our own (no persistence) on a free loopback port."""

    def __init__(self, logs: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed (scripts/services.sh installs it)")
        self.port = targets.free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        log = (logs / "redis.log").open("wb")
        self.popen = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--maxmemory-policy", "noeviction"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        import redis

        self.client = redis.Redis(port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.version = str(self.client.info("server")["redis_version"])

    def memory(self) -> tuple[float, int]:
        used = int(self.client.info("memory")["used_memory"])
        return used / 2**20, int(self.client.dbsize())

    def stop(self) -> None:
        self.client.close()
        self.popen.terminate()
        self.popen.wait(10)


def gateway_config(
    upstream: str, redis_url: str | None, args: argparse.Namespace, engine: str = "openai"
) -> dict[str, Any]:
    cache: dict[str, Any] = {"max_temperature": 2.0, "semantic": args.semantic}
    if args.semantic:
        cache["ttl_s"] = args.cache_ttl_s
    overlay: dict[str, Any] = {
        # Small enough that the stream reaches its cap during warm-up: what is left to
        # see after it is growth that has no bound.
        "ledger": {"stream_max_events": STREAM_EVENTS},
        # Settled ids are kept one TTL (rate x TTL of them): a short TTL lets the soak
        # reach that plateau inside its warm-up.
        "budgets": {"reservation_ttl_s": RESERVATION_TTL_S},
        "tenants": {
            "bench": {
                "keys": [
                    {
                        "id": "bench-1",
                        "from_env": "TIERGATE_BENCH_KEY",
                        "budget": {"limit_usd": 1e6, "window": "daily"},
                    }
                ],
                "budget": {"limit_usd": 1e6, "window": "daily"},
                "rate_limit": {"requests_per_minute": 10_000_000},
                "cache": cache,
            }
        },
    }
    if args.semantic:
        overlay["cache"] = {"semantic": True, "index": "stream" if redis_url else "auto"}
    config = targets.tiergate_config(upstream, overlay)
    if engine == "fake":  # the same models, answered in the gateway process
        config["engines"] = {
            model: {"backend": "fake", "model": model, "options": {"tokens": 16}}
            for model in targets.MODELS
        }
    if redis_url is not None:
        config["redis_url"] = redis_url
    return config


async def drive(
    runner: Runner, process: Process, redis: PrivateRedis | None, args: argparse.Namespace
) -> list[Sample]:
    """Closed loop until ``args.requests`` answered, sampling every ``sample_every``."""
    samples: list[Sample] = []
    begin = time.perf_counter()
    last = (0, begin)
    done = asyncio.Event()

    def sample() -> None:
        nonlocal last
        now = time.perf_counter()
        count = runner.completed
        rps = (count - last[0]) / max(now - last[1], 1e-9)
        used, keys = redis.memory() if redis is not None else (None, None)
        samples.append(Sample(count, now - begin, rps, rss_mb(process), used, keys))
        last = (count, now)
        print(
            f"  {count:>8} req  {now - begin:7.1f}s  {rps:7.0f} req/s  "
            f"rss {samples[-1].rss_mb:7.1f} MB"
            + ("" if used is None else f"  redis {used:7.2f} MB  keys {keys}"),
            flush=True,
        )

    running = asyncio.Event()
    running.set()

    async def pacer() -> None:
        """Every ``idle_every`` requests, no load for ``idle_s``."""
        mark = args.idle_every
        while args.idle_every and not done.is_set():
            await asyncio.sleep(0.01)
            if runner.completed >= mark:
                running.clear()
                await asyncio.sleep(args.idle_s)
                running.set()
                mark += args.idle_every

    async def worker() -> None:
        exchange = await runner.connect()
        while runner.completed < args.requests:
            await running.wait()
            if not await runner.one(exchange, time.perf_counter(), record=True):
                if exchange.transport is not None:
                    exchange.transport.close()
                exchange = await runner.connect()
        if exchange.transport is not None:
            exchange.transport.close()

    async def sampler() -> None:
        checkpoint = args.sample_every
        while not done.is_set():
            await asyncio.sleep(0.05)
            if runner.completed >= checkpoint:
                sample()
                checkpoint += args.sample_every

    sample()
    watcher = asyncio.ensure_future(sampler())
    paced = asyncio.ensure_future(pacer())
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    done.set()
    await watcher
    await paced
    if samples[-1].requests < runner.completed:
        sample()
    return samples


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y against x."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def summarize(mode: str, samples: list[Sample], runner: Runner, warmup: int) -> dict[str, Any]:
    after = [s for s in samples if s.requests >= warmup]
    rates = [s.rps for s in samples[1:]]
    out: dict[str, Any] = {
        "mode": mode,
        "requests": runner.completed,
        "ok": runner.samples.ok,
        "errors": runner.samples.errors,
        "error_kinds": runner.samples.error_kinds,
        "rps_median": statistics.median(rates) if rates else None,
        "rps_range": [min(rates), max(rates)] if rates else None,
        "rss_start_mb": samples[0].rss_mb,
        "rss_at_warmup_mb": after[0].rss_mb if after else None,
        "rss_end_mb": samples[-1].rss_mb,
        "warmup_requests": warmup,
        "samples": [_row(s) for s in samples],
    }
    if len(after) >= 2:
        points = [(float(s.requests), s.rss_mb * 2**20) for s in after]
        out["rss_growth_bytes_per_request"] = slope(points)
        if after[0].redis_mb is not None:
            redis_points = [(float(s.requests), (s.redis_mb or 0.0) * 2**20) for s in after]
            out["redis_growth_bytes_per_request"] = slope(redis_points)
            out["redis_at_warmup_mb"] = after[0].redis_mb
            out["redis_end_mb"] = samples[-1].redis_mb
            out["redis_keys_end"] = samples[-1].redis_keys
    return out


def _row(sample: Sample) -> dict[str, Any]:
    return {name: getattr(sample, name) for name in Sample.__slots__}


def run_mode(
    mode: str, upstream: Process, args: argparse.Namespace, engine: str = "openai"
) -> dict[str, Any]:
    logs = ARTIFACTS / f"{mode}-{engine}"
    logs.mkdir(parents=True, exist_ok=True)
    redis = PrivateRedis(logs) if mode == "redis" else None
    gateway: Process | None = None
    try:
        config = gateway_config(upstream.base_url, redis.url if redis else None, args, engine)
        gateway = targets.start_tiergate(f"tiergate-{mode}-{engine}", config, None, logs)
        host, port = gateway.base_url.removeprefix("http://").split(":")
        spec = {
            "host": host,
            "port": int(port),
            "path": "/v1/chat/completions",
            "api_key": targets.TENANT_KEY,
            "vary": True,
            "body": {
                "model": "bench-0ms",
                "messages": [{"role": "user", "content": "Say something."}],
                "max_tokens": 16,
            },
        }
        runner = Runner(spec)
        print(
            f"{mode}, {engine} engine: {args.requests} requests at concurrency {args.concurrency}",
            flush=True,
        )
        samples = asyncio.run(drive(runner, gateway, redis, args))
        result = summarize(mode, samples, runner, args.warmup)
        result["engine"] = engine
        if redis is not None:
            result["redis_version"] = redis.version
        return result
    finally:
        if gateway is not None:
            gateway.stop()
        if redis is not None:
            redis.stop()


def _stop_on_term(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop_on_term)  # the finally blocks stop the children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--mode", choices=["memory", "redis", "both"], default="both")
    parser.add_argument(
        "--engine",
        choices=["openai", "fake", "both"],
        default="openai",
        help="openai: passthrough to the upstream process; fake: the in-process fake engine",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sample-every", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=40_000)
    parser.add_argument("--semantic", action="store_true", help="semantic cache on")
    parser.add_argument("--cache-ttl-s", type=float, default=3600.0)
    parser.add_argument("--idle-every", type=int, default=0, help="0: never idle")
    parser.add_argument("--idle-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    upstream = targets.start_upstream(None, ARTIFACTS)
    results = []
    try:
        engines = ("openai", "fake") if args.engine == "both" else (args.engine,)
        for engine in engines:
            for mode in ("memory", "redis") if args.mode == "both" else (args.mode,):
                results.append(run_mode(mode, upstream, args, engine))
    finally:
        upstream.stop()
    for result in results:
        line = {k: v for k, v in result.items() if k != "samples"}
        print(json.dumps(line), flush=True)
    out = ARTIFACTS / f"soak-{int(time.time())}.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
