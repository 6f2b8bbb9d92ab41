"""Passthrough's tail next to the least a Python gateway can be, in one run.

    python -m bench.perf.tail_floor [--rounds 5] [--seconds 4] [--concurrency 16 64]

Starts the local 0 ms upstream (pinned to ``--client-core`` with the load generator, as
``bench/perf/overhead.py`` does), tiergate passing requests straight to it, and
``bench/harness/minimal_proxy.py`` (uvicorn + one aiohttp session, nothing else), both
pinned to ``--gateway-core``. Closed-loop rounds interleave direct calls, the minimal
proxy and tiergate; the table gives, per concurrency, each target's p50 / p99 and
p99 / p50 of its latency and of its added latency (minus the direct call's, same round),
median [min-max] over rounds: what part of a p99/p50 ratio a saturated single-core Python
server on this host shows whatever it does, and what tiergate adds to it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.harness import targets
from bench.perf.phases import MESSAGES
from tiergate_testing.net import free_port


def start_minimal_proxy(upstream: str, core: int, logs: Path) -> targets.Process:
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.harness.minimal_proxy:app"]
    argv += ["--port", str(port), "--loop", "uvloop", "--http", "httptools"]
    argv += ["--log-level", "warning", "--no-access-log"]
    env = targets.base_env(TIERGATE_BENCH_UPSTREAM=upstream)
    return targets.spawn("minimal-proxy", argv, core, port, env, logs, ready_path="/")


def load(target: targets.Process, concurrency: int, args: argparse.Namespace, seed: int) -> Any:
    host, _, port = target.base_url.removeprefix("http://").partition(":")
    spec = {
        "host": host,
        "port": int(port),
        "path": "/v1/chat/completions",
        "body": {"model": "bench-0ms", "messages": MESSAGES},
        "api_key": targets.TENANT_KEY,
        "concurrency": concurrency,
        "duration": args.seconds,
        "warmup": 0.5,
        "vary": True,
        "seed": seed,
        "max_inflight": 512,
        "stall_s": 0.1,
    }
    argv = ["taskset", "-c", str(args.client_core), sys.executable]
    argv += [str(targets.HARNESS / "loadgen.py"), json.dumps(spec)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=targets.base_env())
    return json.loads(done.stdout)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--gateway-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/tiergate-bench-tail"))
    args = parser.parse_args()
    upstream = targets.start_upstream(args.client_core, args.logs)
    direct = targets.Process("direct", upstream.popen, upstream.base_url, upstream.log)
    started = [upstream]
    try:
        proxy = start_minimal_proxy(upstream.base_url, args.gateway_core, args.logs)
        started.append(proxy)
        config = targets.tiergate_config(upstream.base_url)
        tiergate = targets.start_tiergate("tiergate", config, args.gateway_core, args.logs)
        started.append(tiergate)
        rows: dict[tuple[int, str], list[dict[str, float]]] = {}
        seed = 0
        for round_no in range(args.rounds):
            for concurrency in args.concurrency:
                base: dict[str, float] = {}
                for target in (direct, proxy, tiergate):
                    seed += 1
                    result = load(target, concurrency, args, seed)
                    p50, p99 = result["latency_p50_ms"], result["latency_p99_ms"]
                    if target is direct:
                        base = {"p50": p50, "p99": p99}
                    row = {"p50": p50, "p99": p99, "ratio": p99 / p50}
                    if target is not direct:
                        added50, added99 = p50 - base["p50"], p99 - base["p99"]
                        row.update(added50=added50, added99=added99, added=added99 / added50)
                    rows.setdefault((concurrency, target.name), []).append(row)
                    print(
                        f"round {round_no + 1} c{concurrency} {target.name:14} p50 {p50:6.2f} "
                        f"p99 {p99:6.2f} ms  p99/p50 {p99 / p50:.2f}  errors {result['errors']}",
                        flush=True,
                    )
    finally:
        for process in reversed(started):
            process.stop()
    print(f"\n0 ms upstream, closed loop, median [min-max] of {args.rounds} rounds")
    print("| c | target | p50 ms | p99 ms | p99/p50 | added p50 | added p99 | added p99/p50 |")
    print("|---|---|---|---|---|---|---|---|")
    for (concurrency, name), runs in rows.items():
        cells = [cell([r[k] for r in runs]) for k in ("p50", "p99", "ratio")]
        added = (
            [cell([r[k] for r in runs]) for k in ("added50", "added99", "added")]
            if "added" in runs[0]
            else ["-"] * 3
        )
        print(f"| {concurrency} | {name} | " + " | ".join(cells + added) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
