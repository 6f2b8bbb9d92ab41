"""The passthrough gateway's CPU per request, streamed and whole, for a before/after.

    python -m bench.perf.stream_cpu [--rounds 6] [--requests 1500]
    cd OLD && PYTHONPATH=$PWD python /path/to/bench/stream_cpu.py   # an older checkout

One ``tiergate serve`` on the passthrough config (``bench.harness.targets.tiergate_config``) pinned
to core 0, the local upstream and this load generator on core 1; 16 concurrent chat
requests (``bench-stream``: streamed, ``bench-0ms``: whole); the figure is the gateway
process's own CPU time (``/proc/PID/stat`` user + system) over the requests of a round,
so the load generator and other processes on the machine do not count, only the CPU they
take from the gateway's core does. Prints every round and the median per kind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from pathlib import Path

import httpx

from bench.harness import targets


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(base_url: str, model: str, requests: int, concurrency: int = 16) -> None:
    body = {
        "model": model,
        "stream": model == "bench-stream",
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"authorization": f"Bearer {targets.TENANT_KEY}"}
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:

        async def one() -> None:
            async with slots:
                async with client.stream(
                    "POST", "/v1/chat/completions", json=body, headers=headers
                ) as reply:
                    reply.raise_for_status()
                    async for _ in reply.aiter_bytes():
                        pass

        await asyncio.gather(*(one() for _ in range(requests)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=1500)
    args = parser.parse_args()
    logs = Path("/tmp/tiergate-bench/stream_cpu")
    upstream = targets.start_upstream(1, logs)
    gateway = targets.start_tiergate(
        "tiergate", targets.tiergate_config(upstream.base_url), 0, logs
    )
    os.sched_setaffinity(0, {1})
    try:
        pid = gateway.popen.pid
        for model in ("bench-stream", "bench-0ms"):
            asyncio.run(load(gateway.base_url, model, 300))  # warm-up
        found: dict[str, list[float]] = {"bench-stream": [], "bench-0ms": []}
        for _ in range(args.rounds):
            for model, rounds in found.items():
                before = cpu_seconds(pid)
                asyncio.run(load(gateway.base_url, model, args.requests))
                rounds.append((cpu_seconds(pid) - before) / args.requests * 1000)
        for model, rounds in found.items():
            line = ", ".join(f"{ms:.2f}" for ms in rounds)
            print(
                f"{model}: gateway CPU ms/request median {statistics.median(rounds):.3f} [{line}]"
            )
    finally:
        gateway.stop()
        upstream.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
