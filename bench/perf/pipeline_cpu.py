"""Where the CPU of one `auto` request goes: every process of the run, in ms per request.

    python -m bench.perf.pipeline_cpu [--seconds 8] [--rounds 3] [--concurrency 16]
        [--stages] [--redis-pipelining] [--json out.json]

Starts a private redis-server (so its CPU is this run's alone), the local 0 ms upstream,
and tiergate twice: passthrough and the full pipeline (``bench/harness/pipeline-overlay.yaml``:
classifier + exact and semantic cache + budgets on that Redis). Closed-loop rounds
interleave the two; each process's CPU time comes from the kernel's counters, so other
tenants of the machine change the wall-clock numbers but hardly the CPU ms per request.

The ceiling on this host: with every process sharing ``--cores`` cores,
req/s <= 1000 * cores / (CPU ms per request summed over all processes); the table
prints that projection next to the measured rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.harness import targets
from bench.perf.overhead import EMBED_WORKER
from bench.perf.phases import MESSAGES

STAGES = ("gateway main", "embedder worker", "redis", "upstream", "load generator")


def proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / targets.TICKS


def run_load(target: targets.Process, spec: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The load generator's summary and its own CPU seconds (from ``wait4``)."""
    argv = [sys.executable, str(targets.HARNESS / "loadgen.py"), json.dumps(spec)]
    with tempfile.TemporaryFile() as out:
        popen = subprocess.Popen(argv, stdout=out, env=targets.base_env())
        _, status, usage = os.wait4(popen.pid, 0)
        popen.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if popen.returncode != 0:
        raise RuntimeError(f"load generator failed ({popen.returncode})")
    return json.loads(text), usage.ru_utime + usage.ru_stime


def phase(
    target: targets.Process,
    model: str,
    upstream: targets.Process,
    redis_pid: int,
    args: argparse.Namespace,
    seed: int,
) -> dict[str, float]:
    host, _, port = target.base_url.removeprefix("http://").partition(":")
    spec = {
        "host": host,
        "port": int(port),
        "path": "/v1/chat/completions",
        "body": {"model": model, "messages": MESSAGES},
        "api_key": targets.TENANT_KEY,
        "concurrency": args.concurrency,
        "duration": args.seconds,
        "warmup": 0.0,
        "vary": True,
        "seed": seed,
        "max_inflight": 512,
        "stall_s": 0.1,
    }
    before = _snapshot(target, upstream, redis_pid)
    result, load_cpu = run_load(target, spec)
    after = _snapshot(target, upstream, redis_pid)
    n = max(result["completed_total"], 1)
    row = {stage: 1000 * (after[stage] - before[stage]) / n for stage in STAGES[:-1]}
    row["load generator"] = 1000 * load_cpu / n
    row["total"] = sum(row[s] for s in STAGES)
    row["req_s"] = result["throughput"]
    row["p50_ms"] = result["latency_p50_ms"] or 0.0
    row["errors"] = result["errors"]
    for stage, value in (result.get("timing_p50_ms") or {}).items():
        row[f"timing {stage}"] = value or 0.0
    row["ceiling_req_s"] = 1000 * args.cores / row["total"] if row["total"] else 0.0
    return row


def _snapshot(
    target: targets.Process, upstream: targets.Process, redis_pid: int
) -> dict[str, float]:
    workers = target.cpu_seconds(EMBED_WORKER)
    return {
        "gateway main": target.cpu_seconds() - workers,
        "embedder worker": workers,
        "redis": proc_cpu_s(redis_pid),
        "upstream": upstream.cpu_seconds(),
    }


def variants(
    overlay: dict[str, Any], stages: bool, pipelining: bool = False
) -> dict[str, dict[str, Any]]:
    """The full pipeline; with ``stages`` also without the cache, so the difference is the
    cache's CPU. (Budgets and the spend ledger run on Redis in both: every tier is priced.)
    With ``pipelining`` also the full pipeline with ``redis_pipelining: false`` (every
    Redis command in a round trip of its own), so the difference is what coalescing saves.
    The bench tenant's requests are cacheable only where ``tenants.bench.cache`` says so."""
    full = {"auto full pipeline": overlay}
    if pipelining:
        full = {"auto, redis pipelining off": {**overlay, "redis_pipelining": False}, **full}
    if not stages:
        return full
    tenant = overlay.get("tenants", {}).get("bench", {})
    no_cache = {
        "routing": overlay.get("routing", {"classifier": {}}),
        "tenants": {"bench": {"budget": tenant.get("budget", {})}},
    }
    return {"auto, cache off": no_cache, **full}


def start_gateways(
    upstream: targets.Process, redis_url: str, args: argparse.Namespace, into: list[targets.Process]
) -> dict[str, tuple[targets.Process, str]]:
    overlay = yaml.safe_load(args.overlay.read_text()) or {}
    configs = {"passthrough": (targets.tiergate_config(upstream.base_url), "bench-0ms")}
    for name, layer in variants(overlay, args.stages, args.redis_pipelining).items():
        configs[name] = (targets.pipeline_config(upstream.base_url, redis_url, layer), "auto")
    started: dict[str, tuple[targets.Process, str]] = {}
    for n, (name, (config, model)) in enumerate(configs.items()):
        started[name] = (targets.start_tiergate(f"cpu-{n}", config, None, args.logs), model)
        into.append(started[name][0])
    return started


def run_rounds(
    started: dict[str, tuple[targets.Process, str]],
    upstream: targets.Process,
    redis_pid: int,
    args: argparse.Namespace,
) -> dict[str, list[dict[str, float]]]:
    rows: dict[str, list[dict[str, float]]] = {}
    seed = 0
    for process, model in started.values():  # warm-up
        seed += 1
        phase(process, model, upstream, redis_pid, args, seed)
    for round_no in range(args.rounds):
        for name, (process, model) in started.items():
            seed += 1
            row = phase(process, model, upstream, redis_pid, args, seed)
            rows.setdefault(name, []).append(row)
            print(
                f"round {round_no + 1} {name:18} {row['req_s']:6.0f} req/s "
                f"(ceiling {row['ceiling_req_s']:5.0f}) p50 {row['p50_ms']:6.2f} ms  "
                + "  ".join(f"{s} {row[s]:.2f}" for s in STAGES)
                + f"  total {row['total']:.2f} CPU ms/req  errors {row['errors']}",
                flush=True,
            )
    return rows


def print_table(rows: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    print(f"\nCPU ms per request at c{args.concurrency}, median [min-max] of {args.rounds} rounds")
    fields = (*STAGES, "total", "req_s", "ceiling_req_s", "p50_ms", "timing classification")
    print("| | " + " | ".join(fields) + " |")
    print("|---" * (len(fields) + 1) + "|")
    for name, runs in rows.items():
        cells = []
        for field in fields:
            values = [r.get(field, 0.0) for r in runs]
            cells.append(f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--overlay", type=Path, default=targets.HARNESS / "pipeline-overlay.yaml")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/tiergate-bench-cpu"))
    parser.add_argument("--stages", action="store_true", help="also the pipeline without cache")
    parser.add_argument(
        "--redis-pipelining",
        action="store_true",
        help="also the pipeline with redis_pipelining: false",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    processes: list[targets.Process] = []
    with tempfile.TemporaryDirectory() as folder:
        redis_popen, redis_url = targets.start_private_redis(Path(folder))
        try:
            upstream = targets.start_upstream(None, args.logs)
            processes.append(upstream)
            started = start_gateways(upstream, redis_url, args, processes)
            rows = run_rounds(started, upstream, redis_popen.pid, args)
        finally:
            for process in processes:
                process.stop()
            redis_popen.terminate()
            redis_popen.wait(10)
    print_table(rows, args)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
