"""Requests/s through a front with 2 engine nodes vs straight to one node; failover time.

    python -m bench.perf.multinode [--rounds 5] [--duration 8] [--concurrency 24] [--kills 3]

Two engine-node processes (``tiergate serve`` on the protocol fake, each bounded to
``--node-slots`` requests at once at a fixed pace, so a node has a capacity like a GPU
engine has) and one front process that finds them through an endpoints file, plus the
shared Redis. Closed-loop streamed chat completions (bench/harness/loadgen.py, its own process)
go, in interleaved rounds, (a) straight to node 1 with the node's key and (b) through
the front. The ratio b/a per round is what two nodes behind a front buy over one node;
the table gives medians and ranges over rounds. Then, under load through the front,
node 2 is SIGKILLed (``--kills`` times, restarted in between) and the time until the
front has it out of rotation is measured twice: from the front's own log line (its
wall-clock time) and as seen on its /readyz polled every 5 ms; with the load's errors.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tiergate_testing.gateways import REPO, GatewayProcess, subprocess_env
from tiergate_testing.nodes import MODEL, NODE_KEY, NodeProcess, front_config, write_endpoints

TENANT_KEY = "tg-bench-multinode-key-0123"
REDIS_URL = os.environ.get("TIERGATE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
OUT_OF_ROTATION = re.compile(r"@(?P<node>\S+) out of rotation .* at unix (?P<at>[0-9.]+)")
MESSAGES = [{"role": "user", "content": "Summarise the benefits of connection pooling."}]


class FrontProcess(GatewayProcess):
    def __init__(self, workdir: Path, endpoints: Path) -> None:
        self.prefix = f"tg-bench-mn-{os.getpid()}"
        env = subprocess_env(TIERGATE_NODE_KEY=NODE_KEY, TIERGATE_TEST_KEY=TENANT_KEY)
        config = front_config(endpoints, REDIS_URL, self.prefix)
        super().__init__(config, workdir, name="front", env=env)

    def nodes(self) -> dict[str, bool]:
        body = httpx.get(self.base_url + "/readyz", timeout=2).json()
        nodes: dict[str, bool] = body.get("nodes", {}).get("small-nodes", {})
        return nodes

    def marked_out(self, node: str, after: float) -> float | None:
        """When the front first logged ``node`` out of rotation after ``after`` (unix)."""
        for line in self.log_text().splitlines():
            found = OUT_OF_ROTATION.search(line)
            if found and found["node"] == node and float(found["at"]) > after:
                return float(found["at"])
        return None


def load_spec(url: str, key: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    host_port = url.removeprefix("http://").split("/", 1)[0]
    host, _, port = host_port.partition(":")
    return {
        "host": host,
        "port": int(port),
        "path": "/v1/chat/completions",
        "body": {"model": MODEL, "messages": MESSAGES, "stream": True},
        "api_key": key,
        "concurrency": args.concurrency,
        "duration": args.duration,
        "warmup": 1.0,
        "rate": None,
        "max_inflight": 512,
        "vary": True,
        "seed": seed,
    }


def loadgen(spec: dict[str, Any]) -> subprocess.Popen[str]:
    argv = [sys.executable, str(REPO / "bench" / "harness" / "loadgen.py"), json.dumps(spec)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed: {err[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    return result


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--node-slots", type=int, default=4, help="requests a node runs at once")
    parser.add_argument("--token-delay", type=float, default=0.025)
    parser.add_argument("--kills", type=int, default=3, help="node kills under load")
    args = parser.parse_args()
    pace = {
        "tokens": 8,
        "first_token_delay_s": 0.02,
        "token_delay_s": args.token_delay,
        "max_inflight": args.node_slots,
    }
    with tempfile.TemporaryDirectory(prefix="tg-multinode-") as scratch:
        workdir = Path(scratch)
        nodes = [NodeProcess(workdir, f"node{i}", **pace) for i in range(2)]
        endpoints = workdir / "nodes.txt"
        front = FrontProcess(workdir, endpoints)
        try:
            for node in nodes:
                node.spawn()
            for node in nodes:
                node.wait_ready()
            write_endpoints(endpoints, nodes)
            front.start(timeout_s=90)
            return run(args, nodes, front)
        finally:
            front.stop()
            for node in nodes:
                node.stop()


def run(args: argparse.Namespace, nodes: list[NodeProcess], front: FrontProcess) -> int:
    direct: list[float] = []
    through: list[float] = []
    ratios: list[float] = []
    errors = 0
    for round_no in range(args.rounds):
        one = finish(loadgen(load_spec(nodes[0].api_url, NODE_KEY, args, 2 * round_no)))
        two = finish(loadgen(load_spec(front.base_url, TENANT_KEY, args, 2 * round_no + 1)))
        direct.append(one["throughput"])
        through.append(two["throughput"])
        ratios.append(two["throughput"] / one["throughput"])
        errors += one["errors"] + two["errors"]
        print(
            f"round {round_no + 1}: direct to 1 node {one['throughput']:.1f} req/s "
            f"(p50 {one['latency_p50_ms']:.0f} ms), front + 2 nodes {two['throughput']:.1f} "
            f"req/s (p50 {two['latency_p50_ms']:.0f} ms), ratio {ratios[-1]:.2f}",
            flush=True,
        )
    print(f"\nnode slots {args.node_slots}, concurrency {args.concurrency}, {args.rounds} rounds")
    print(f"direct to 1 node  req/s median (range): {spread(direct)}")
    print(f"front + 2 nodes   req/s median (range): {spread(through)}")
    print(f"ratio front/direct      median (range): {spread(ratios)}")
    print(f"errors in these runs: {errors}")

    return 0 if kill_rounds(args, nodes, front) else 1


def kill_rounds(args: argparse.Namespace, nodes: list[NodeProcess], front: FrontProcess) -> bool:
    """SIGKILL node 2 under load, ``--kills`` times (restarted in between)."""
    victim = f"127.0.0.1:{nodes[1].port}"
    logged: list[float] = []
    polled: list[float] = []
    for kill_no in range(args.kills):
        if kill_no:
            nodes[1].spawn()
            nodes[1].wait_ready()
            while not front.nodes().get(victim, False):
                time.sleep(0.05)
        spec = load_spec(front.base_url, TENANT_KEY, args, 10_000 + kill_no)
        spec["duration"], spec["warmup"] = 5.0, 0.0
        proc = loadgen(spec)
        time.sleep(2.0)
        killed, killed_wall = time.monotonic(), time.time()
        nodes[1].kill()
        while front.nodes().get(victim, False):
            if time.monotonic() - killed > 10:
                print("the killed node was never taken out")
                return False
            time.sleep(0.005)
        polled.append(time.monotonic() - killed)
        result = finish(proc)
        marked = front.marked_out(victim, after=killed_wall - 1.0)
        if marked is not None:
            logged.append(marked - killed_wall)
        print(
            f"kill {kill_no + 1}: out of rotation "
            f"{(marked - killed_wall) * 1000 if marked else float('nan'):.0f} ms after SIGKILL "
            f"(front's log), /readyz showed it at {polled[-1] * 1000:.0f} ms; load across it: "
            f"{result['ok']} ok, {result['errors']} errors {result['error_kinds']}",
            flush=True,
        )
    ms = [v * 1000 for v in logged]
    print(f"\nfailover, front's log, ms median (range): {spread(ms) if ms else 'not logged'}")
    print(f"failover, /readyz over HTTP, ms median (range): {spread([v * 1000 for v in polled])}")
    return True


if __name__ == "__main__":
    raise SystemExit(main())
