"""Each tier's answer to every prompt of a set, recorded once through a real ``tiergate serve``.

Starts ``tiergate serve`` on the given config (default: the shipped three-tier
``config/gateway.yaml``), then asks each named tier every prompt of the set, one at a time,
greedy (temperature 0), with the prompt kind's ``max_tokens``, ``logprobs`` and 5
``top_logprobs``, past the cache (``Cache-Control: no-cache, no-store``). One JSONL per set and
tier under ``bench/live/records/`` (``--dir D``: ``D/records/``); a row already there is not
asked again, so a stopped run resumes where it stopped (prompts go in a fixed shuffled order:
a part is a sample of all kinds). Each row carries the answer, finish reason, usage, the priced cost
(``x-tiergate-cost-usd``), the token log-probabilities and the **engine CPU-seconds**: the
serving process's CPU time (all its threads, llama.cpp's included) across the request, read
from ``/proc`` (requests run one at a time, so the process did nothing else meanwhile).

Usage: ``python -m bench.live.record --set heldout --tiers large,medium,small``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.live.sets import load

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KEY = "live-bench-key"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def start_gateway(config: Path, port: int, ready_s: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TIERGATE_DEMO_KEY": KEY, "TIERGATE_LOG_LEVEL": "warning"}
    command = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    proc = subprocess.Popen([*command, "--port", str(port)], cwd=REPO, env=env)
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tiergate serve exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.terminate()
    raise SystemExit(f"tiergate serve was not ready within {ready_s:.0f} s")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def ask(
    client: httpx.Client, process: psutil.Process, tier: str, item: dict[str, Any]
) -> dict[str, Any]:
    body = {
        "model": tier,
        "messages": [{"role": "user", "content": item["prompt"]}],
        "max_tokens": item["max_tokens"],
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
    }
    headers = {"cache-control": "no-cache, no-store"}
    cpu, wall = cpu_seconds(process), time.monotonic()
    response = client.post("/v1/chat/completions", json=body, headers=headers)
    cpu, wall = cpu_seconds(process) - cpu, time.monotonic() - wall
    row: dict[str, Any] = {"id": item["id"], "kind": item["kind"], "tier": tier}
    if response.status_code != 200:
        return {**row, "error": response.text[:500], "status": response.status_code}
    data = response.json()
    choice = data["choices"][0]
    logprobs = [
        {
            "token": entry["token"],
            "logprob": entry["logprob"],
            "top": [[alt["token"], alt["logprob"]] for alt in entry.get("top_logprobs") or []],
        }
        for entry in (choice.get("logprobs") or {}).get("content") or []
    ]
    return {
        **row,
        "model": data["model"],
        "answer": choice["message"].get("content") or "",
        "finish_reason": choice["finish_reason"],
        "prompt_tokens": data["usage"]["prompt_tokens"],
        "completion_tokens": data["usage"]["completion_tokens"],
        "cost_usd": float(response.headers.get("x-tiergate-cost-usd", "nan")),
        "cpu_s": round(cpu, 4),
        "wall_s": round(wall, 4),
        "logprobs": logprobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", default="heldout", choices=["heldout", "fit"])
    parser.add_argument("--tiers", default="large,medium,small")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "gateway.yaml")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--limit", type=int, default=0, help="at most this many new rows a tier")
    parser.add_argument(
        "--reverse",
        action="store_true",
        help="the shuffled order backwards: a second recorder of the same tier meets the first",
    )
    parser.add_argument("--dir", type=Path, default=HERE, help="records go to DIR/records/")
    parser.add_argument("--ready-s", type=float, default=600, help="to load the engines")
    args = parser.parse_args()
    items = load(args.set)
    records = args.dir / "records"
    records.mkdir(parents=True, exist_ok=True)
    # A free port unless one is given: a stale server on a fixed port would answer in its place.
    port = args.port or free_port()
    proc = start_gateway(args.config, port, args.ready_s)
    process = psutil.Process(proc.pid)
    cpu = cpu_name()
    try:
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"authorization": f"Bearer {KEY}"},
            timeout=900,
        )
        for tier in args.tiers.split(","):
            out = records / f"{args.set}-{tier}.jsonl"
            done = set()
            if out.exists():
                done = {json.loads(line)["id"] for line in out.read_text().splitlines() if line}
            # In a fixed shuffled order: a run stopped early is still a sample of every kind.
            todo = sorted(
                (item for item in items if item["id"] not in done),
                key=lambda item: hashlib.sha256(item["id"].encode()).hexdigest(),
                reverse=args.reverse,
            )
            if args.limit:
                todo = todo[: args.limit]
            print(f"{tier}: {len(done)} recorded, {len(todo)} to go", flush=True)
            with out.open("a", encoding="utf-8") as file:
                for n, item in enumerate(todo, 1):
                    row = ask(client, process, tier, item)
                    row["cpu"] = cpu
                    file.write(json.dumps(row, ensure_ascii=False) + "\n")
                    file.flush()
                    if n % 10 == 0:
                        print(f"{tier}: {n}/{len(todo)}", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
