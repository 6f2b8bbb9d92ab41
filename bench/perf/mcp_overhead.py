"""An MCP tool call through tiergate's ``/mcp`` vs straight to the upstream, in one run.

    python -m bench.perf.mcp_overhead                  # 5 rounds, http upstream
    python -m bench.perf.mcp_overhead --upstreams http,stdio --rounds 3 --calls 300

One upstream MCP server built with the official SDK (``tiergate_testing.mcp_upstream``,
its ``echo`` tool: a few bytes each way) and one ``tiergate serve`` whose ``mcp.servers``
names it: over streamable HTTP (the same process the direct calls reach), or over stdio
(the gateway runs it; the direct calls go to a process the bench starts the same way).
The load is the official SDK client (``mode="auto"``, so the 2026-07-28 protocol on both
legs), ``--calls`` calls per phase at concurrency 1 and 16, after a warm-up. Each round
runs every phase, direct and through tiergate alternating, so noise hits both alike.

Reported per phase: calls/s, p50 and p99 latency, and CPU ms per call of each process
(the gateway's is what tiergate adds; read from /proc), as the median and range over
rounds; and per round the ratios through/direct of p50 latency and of CPU per call
(gateway + upstream against upstream alone).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench.harness.report import machine
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import GatewayProcess, subprocess_env
from tiergate_testing.mcp_servers import UPSTREAM, stdio_server, upstream_process

TICKS = os.sysconf("SC_CLK_TCK")
WARMUP = 30


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


@dataclass
class Phase:
    name: str
    concurrency: int
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, metric: str, value: float) -> None:
        self.samples.setdefault(metric, []).append(value)


def client_for(target: str | StdioServerParameters) -> Client:
    if isinstance(target, StdioServerParameters):
        return Client(target, mode="auto", cache=None)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TEST_KEY}"}, timeout=60)
    return Client(streamable_http_client(target, http_client=http), mode="auto", cache=None)


async def load(
    target: str | StdioServerParameters,
    tool: str,
    calls: int,
    concurrency: int,
    pids: Callable[[], dict[str, int]],
) -> dict[str, float]:
    async with client_for(target) as client:
        await client.list_tools()
        for i in range(WARMUP):
            await client.session.call_tool(tool, {"text": f"warm {i}"})
        queue = iter(range(calls))
        latencies: list[float] = []

        async def worker() -> None:
            for i in queue:
                started = time.perf_counter()
                await client.session.call_tool(tool, {"text": f"call {i}"})
                latencies.append(time.perf_counter() - started)

        processes = pids()
        before = {name: cpu_seconds(pid) for name, pid in processes.items()}
        mine, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        used = {name: cpu_seconds(pid) - before[name] for name, pid in processes.items()}
        client_cpu = time.process_time() - mine
    out = {
        "calls_per_s": calls / wall,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "client_cpu_ms": client_cpu / calls * 1000,
    }
    out.update({f"{name}_cpu_ms": spent / calls * 1000 for name, spent in used.items()})
    return out


def upstream_pid_of(gateway_pid: int) -> int:
    """The gateway's stdio upstream: its one child process running the test upstream."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == gateway_pid and b"tiergate_testing.mcp_upstream" in cmdline:
            return int(entry.name)
    raise LookupError("the gateway runs no upstream process")


def stdio_direct_pid(bench_pid: int) -> int:
    return upstream_pid_of(bench_pid)


@contextmanager
def gateway_for(kind: str, workdir: Path, url: str | None) -> Iterator[GatewayProcess]:
    config = fake_config()
    config["tenants"]["acme"]["mcp_tools"] = ["up.*"]
    server = stdio_server("up") if kind == "stdio" else {"url": url}
    config["mcp"] = {"servers": {"up": server}}
    env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY)
    with GatewayProcess(config, workdir, name=f"gateway-{kind}", env=env) as gateway:
        yield gateway


def run_kind(kind: str, args: argparse.Namespace, workdir: Path) -> list[Phase]:
    phases = [Phase(f"{path} c{c}", c) for c in (1, 16) for path in ("direct", "tiergate")]
    with ExitStack() as stack:
        url: str | None = None
        upstream_pid = 0
        if kind == "http":
            url, process = stack.enter_context(upstream_process("up"))
            upstream_pid = process.pid
        gateway = stack.enter_context(gateway_for(kind, workdir, url))
        assert gateway.popen is not None
        gateway_pid = gateway.popen.pid
        stdio = StdioServerParameters(command=UPSTREAM[0], args=[*UPSTREAM[1:], "--name", "up"])
        direct: str | StdioServerParameters = url if url is not None else stdio
        for round_no in range(args.rounds):
            for phase in phases:
                through = phase.name.startswith("tiergate")

                def pids(through: bool = through) -> dict[str, int]:
                    if through:
                        up = upstream_pid or upstream_pid_of(gateway_pid)
                        return {"gateway": gateway_pid, "upstream": up}
                    return {"upstream": upstream_pid or stdio_direct_pid(os.getpid())}

                target = f"{gateway.base_url}/mcp" if through else direct
                tool = "up.echo" if through else "echo"
                row = asyncio.run(load(target, tool, args.calls, phase.concurrency, pids))
                for metric, value in row.items():
                    phase.add(metric, value)
            print(f"{kind}: round {round_no + 1}/{args.rounds} done", file=sys.stderr)
    return phases


def spread(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def render(kind: str, phases: list[Phase]) -> str:
    lines = [
        f"\n### upstream over {kind}\n",
        "| phase | calls/s | p50 ms | p99 ms | gateway CPU ms/call | upstream CPU ms/call "
        "| client CPU ms/call |",
        "|---|---|---|---|---|---|---|",
    ]
    for phase in phases:
        s = phase.samples
        lines.append(
            f"| {phase.name} | {spread(s['calls_per_s'], 0)} | {spread(s['p50_ms'])} "
            f"| {spread(s['p99_ms'])} | {spread(s.get('gateway_cpu_ms', []))} "
            f"| {spread(s['upstream_cpu_ms'])} | {spread(s['client_cpu_ms'])} |"
        )
    by_name = {p.name: p.samples for p in phases}
    lines.append("")
    for c in (1, 16):
        direct, through = by_name[f"direct c{c}"], by_name[f"tiergate c{c}"]
        p50 = [t / d for t, d in zip(through["p50_ms"], direct["p50_ms"], strict=True)]
        cpu = [
            (g + u) / d
            for g, u, d in zip(
                through["gateway_cpu_ms"],
                through["upstream_cpu_ms"],
                direct["upstream_cpu_ms"],
                strict=True,
            )
        ]
        lines.append(
            f"- c{c}: p50 latency through/direct {spread(p50)}; server-side CPU per call "
            f"(gateway + upstream) / (upstream alone) {spread(cpu)}; the gateway adds "
            f"{spread(through['gateway_cpu_ms'])} ms CPU per call"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--upstreams", default="http", help="http, stdio or http,stdio")
    args = parser.parse_args()
    print(f"# MCP tool call: tiergate /mcp vs straight to the upstream\n\n{machine()}")
    print(f"{args.rounds} rounds, {args.calls} calls per phase after {WARMUP} warm-up calls")
    context: Callable[[], AbstractContextManager[str]] = tempfile.TemporaryDirectory
    with context() as tmp:
        for kind in args.upstreams.split(","):
            print(render(kind, run_kind(kind, args, Path(tmp) / kind)), flush=True)


if __name__ == "__main__":
    main()
