"""What ``routing.feedback`` costs the front: CPU ms per ``auto`` request, feedback off
against feedback on (1 % shadowed by default), in one session.

    python -m bench.perf.feedback_overhead [--sample 0.01] [--seconds 8] [--rounds 5]
        [--concurrency 16]

Starts a private redis-server, the local 0 ms upstream, and tiergate on the same
three-tier ``auto`` pipeline (the shipped classifier, per-tier quality model and objective
``{quality: 0.95}``, budgets and the ledger on that Redis, every tier passing through to
the upstream over the ``openai`` backend, as a front before engine nodes): without
``routing.feedback``; with it and no shadow (the records alone); at ``--sample``; at
``--sample`` with a refit serving (published to that gateway's store before it starts, so
routing reads the refit's per-tier predictions); and with every request shadowed. The
judge is the large tier;
the upstream's answer holds no verdict, so the judge's call is paid and no label is made:
the CPU of the whole pair). With feedback on, every request also gets its record, written
in batches. Rounds interleave the two; each process's CPU comes from the kernel's counters.

The ratio is of the gateway's main process (the front's event loop: routing, the records,
the shadow and judge calls); the embedder worker does the same work either way and is
reported apart. Medians and ranges over the rounds; the goal: at most 1.02.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.harness import targets
from bench.perf.pipeline_cpu import STAGES, phase
from policies.stores.feedback import RefitEntry
from policies.stores.feedback_redis import RedisFeedbackStore
from policies.stores.store_redis import RedisStore
from routers.features import FEATURES
from routers.refit import Correction

ROUTING: dict[str, Any] = {"classifier": {}, "objective": {"quality": 0.95}}
OVERLAY: dict[str, Any] = {
    "tenants": {"bench": {"budget": {"limit_usd": 1_000_000, "window": "daily"}}},
    "routing": ROUTING,
}
REFIT = "refit serving"


def feedback_overlay(sample: float, prefix: str | None = None) -> dict[str, Any]:
    feedback = {"sample": sample, "judge": {"tier": "large"}, "max_concurrent": 64}
    overlay = {**OVERLAY, "routing": {**ROUTING, "feedback": feedback}}
    if prefix is not None:  # its own store: the refit published there serves
        overlay["redis_prefix"] = prefix
    return overlay


def variants(sample: float) -> dict[str, dict[str, Any]]:
    """Off; on with no shadow (the records alone); on at ``sample``; the same with a refit
    serving; on for every request (what one shadow pair costs, measured 100 times larger
    than at 1 %)."""
    return {
        "feedback off": OVERLAY,
        "records only": feedback_overlay(0.0),
        f"feedback {sample:g}": feedback_overlay(sample),
        f"{REFIT} {sample:g}": feedback_overlay(sample, targets.pipeline_prefix() + "refit"),
        "feedback 1": feedback_overlay(1.0),
    }


def a_refit(seed: int = 0) -> Correction:
    """A correction of the shape the online refit publishes (8 directions over the MiniLM
    embedding, the 20 text features), with small coefficients: what it costs to route by
    one does not depend on what it learnt."""
    rng = np.random.default_rng(seed)
    dim, k, tiers = 384, 8, ("small", "medium", "large")
    directions = np.linalg.qr(rng.normal(size=(dim, k)))[0].T.astype(np.float32)
    return Correction(
        tiers=tiers,
        centre=np.zeros(dim, np.float32),
        directions=directions,
        feature_mean=np.zeros(len(FEATURES), np.float32),
        feature_scale=np.ones(len(FEATURES), np.float32),
        coef=rng.normal(scale=0.05, size=(len(tiers), 2 + k + len(FEATURES))),
        fitted=(100, 100, 100),
    )


async def publish_refit(redis_url: str, prefix: str) -> int:
    """Make ``a_refit`` the serving model of the store under ``prefix``."""
    store = RedisStore(redis_url, root=prefix)
    try:
        entry = RefitEntry(0.0, "accepted", "bench: a published refit", 0, 0, {}, by="bench")
        stored = await RedisFeedbackStore(store).add_refit(entry, a_refit().to_bytes(), 50)
        return stored.version
    finally:
        await store.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sample", type=float, default=0.01)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/tiergate-bench-feedback"))
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    processes: list[targets.Process] = []
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        redis_popen, redis_url = targets.start_private_redis(Path(folder))
        try:
            upstream = targets.start_upstream(None, args.logs)
            processes.append(upstream)
            started = {}
            for n, (name, layer) in enumerate(variants(args.sample).items()):
                config = targets.pipeline_config(upstream.base_url, redis_url, layer)
                if name.startswith(REFIT):
                    asyncio.run(publish_refit(redis_url, config["redis_prefix"]))
                started[name] = targets.start_tiergate(f"feedback-{n}", config, None, args.logs)
                processes.append(started[name])
            for name, process in started.items():  # which model routing reads, per variant
                print(f"{name:18} /v1/route quality_model {quality_model(process)}", flush=True)
            seed = 0
            for round_no in range(args.rounds + 1):  # the first round warms up
                for name, process in started.items():
                    seed += 1
                    row = phase(process, "auto", upstream, redis_popen.pid, args, seed)
                    if round_no:
                        rows.setdefault(name, []).append(row)
                    print(
                        f"round {round_no} {name:14} {row['req_s']:6.0f} req/s  "
                        + "  ".join(f"{s} {row[s]:.3f}" for s in STAGES)
                        + f"  errors {row['errors']}",
                        flush=True,
                    )
        finally:
            for process in processes:
                process.stop()
            redis_popen.terminate()
            redis_popen.wait(10)
    report(rows, args)
    return 0


def quality_model(process: targets.Process) -> object:
    """What ``/v1/route`` says gave the per-tier predictions (the refit variant: the
    published refit, once the replica has polled the store)."""
    body = {"model": "auto", "messages": [{"role": "user", "content": "Name a prime."}]}
    headers = {"authorization": f"Bearer {targets.TENANT_KEY}"}
    for _ in range(50):
        got = httpx.post(f"{process.base_url}/v1/route", json=body, headers=headers, timeout=30)
        found = got.json().get("quality_model")
        version = None if found is None else found.get("version")
        if version is None or version >= 0:  # None: no feedback loop; -1: not polled yet
            return found
        time.sleep(0.2)  # not polled yet
    return found


def _spread(values: list[float], digits: int = 3) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def report(rows: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    print(
        f"\nCPU ms per auto request at c{args.concurrency}, median [min-max] of "
        f"{args.rounds} rounds"
    )
    print("| | gateway main | embedder worker | redis | req/s | gateway main / off |")
    print("|---|---|---|---|---|---|")
    off = rows["feedback off"]
    for name, runs in rows.items():
        cells = [
            _spread([r[k] for r in runs]) for k in ("gateway main", "embedder worker", "redis")
        ]
        rate = _spread([r["req_s"] for r in runs], 0)
        ratios = [b["gateway main"] / a["gateway main"] for a, b in zip(off, runs, strict=True)]
        print(f"| {name} | " + " | ".join(cells) + f" | {rate} | {_spread(ratios)} |")

    def median(name: str) -> float:
        return statistics.median(r["gateway main"] for r in rows[name])

    base, records, every = median("feedback off"), median("records only"), median("feedback 1")
    projected = (records + args.sample * (every - records)) / base
    sampled, refit = median(f"feedback {args.sample:g}"), median(f"{REFIT} {args.sample:g}")
    print(
        f"\none shadow pair (shadow answer + judge) costs the front {every - records:.2f} CPU ms; "
        f"records {records - base:+.3f} ms per request; routing by the refit "
        f"{refit - sampled:+.3f} ms per request"
    )
    print(
        f"feedback {args.sample:g}: measured {sampled / base:.3f}, with a refit serving "
        f"{refit / base:.3f}, from the parts {projected:.3f} of feedback off (goal <= 1.02)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
