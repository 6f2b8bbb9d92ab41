"""Passthrough cost of API-managed keys next to YAML keys, in one run on this machine.

    python -m bench.perf.keys_overhead            # 7 rounds (about 2 minutes on 2 cores)
    python -m bench.perf.keys_overhead --quick    # 3 rounds, short phases (about 1 minute)

One ``tiergate serve`` passing requests straight to the 0 ms upstream, on real Redis
(so managed keys live where they do in production), pinned to one core; the load
generator (``bench/harness/loadgen.py``) on the other. The gateway has a YAML key and an
API-managed key issued through ``POST /admin/api/keys``; rounds alternate the two keys
on the same process, so noise hits both alike. Reported: gateway CPU per request
(median and range over rounds) and the ratio managed / YAML per round.

Then, in this process, what resolving a key costs: a YAML key, a managed key from the
local cache (the hot path) and a managed key on a cache miss (one ``HGET`` on Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

import httpx

from bench.harness import targets
from bench.perf.overhead import Bench
from bench.perf.phases import Phase

ADMIN_KEY = "tg-bench-admin-6d0f2a8c4b1e4f7a9c3d5e7f"
PHASES = (
    Phase("0ms c1", "bench-0ms", False, 1),
    Phase("0ms c16", "bench-0ms", False, 16),
)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def issue_key(base_url: str) -> str:
    response = httpx.post(
        base_url + "/admin/api/keys",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        json={"tenant": "bench", "name": "keys-overhead bench"},
        timeout=10,
    )
    response.raise_for_status()
    raw: str = response.json()["key"]
    return raw


def gateway_rounds(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    processes: dict[str, targets.Process] = {}
    out: dict[str, dict[str, list[float]]] = {}
    try:
        upstream = targets.start_upstream(args.client_core, args.logs)
        processes["direct"] = upstream
        config = targets.tiergate_config(upstream.base_url)
        config.update(
            redis_url=args.redis_url,
            redis_prefix=targets.pipeline_prefix(),
            admin={"key_from_env": "TIERGATE_ADMIN_KEY"},
        )
        gateway = targets.start_tiergate(
            "tiergate-keys", config, args.gateway_core, args.logs, TIERGATE_ADMIN_KEY=ADMIN_KEY
        )
        processes["tiergate"] = gateway
        keys = {"yaml": targets.TENANT_KEY, "managed": issue_key(gateway.base_url)}
        bench = Bench(args)
        bench.processes = {"tiergate": gateway}
        for phase in PHASES:  # warm both paths (imports, pools, the key cache)
            for key in keys.values():
                bench.load(gateway, phase, duration=args.warmup * 2, api_key=key)
        for round_no in range(args.rounds):
            for phase in PHASES:
                # Alternate which key goes first, so neither always runs on a warmer core.
                order = list(keys.items()) if round_no % 2 == 0 else list(keys.items())[::-1]
                for name, key in order:
                    bench.settle(bench.processes)
                    result = bench.load(gateway, phase, api_key=key)
                    if result["errors"]:
                        raise RuntimeError(f"{name} {phase.name}: {result['errors']} errors")
                    row = out.setdefault(f"{phase.name} {name}", {"cpu": [], "p50": []})
                    row["cpu"].append(result["cpu_ms_per_req"])
                    row["p50"].append(result["latency_p50_ms"])
                    print(
                        f"  round {round_no + 1} {phase.name:8} {name:8} "
                        f"cpu {result['cpu_ms_per_req']:.3f} ms/req "
                        f"p50 {result['latency_p50_ms']:.2f} ms "
                        f"{result['throughput']:.0f} req/s",
                        flush=True,
                    )
    finally:
        for process in processes.values():
            process.stop()
        targets.drop_pipeline_keys(args.redis_url)
    return out


async def resolution_cost(redis_url: str, iterations: int) -> dict[str, float]:
    """Microseconds per ``authenticate`` call on this process's event loop."""
    from policies.schema import GatewayConfig
    from policies.stores.key_directory import KeyDirectory
    from policies.stores.keys import KeyScope, issue_key
    from policies.stores.keys_redis import RedisKeyStore
    from policies.stores.store_redis import RedisStore
    from policies.tenants import KeyRing

    config = GatewayConfig.model_validate(targets.tiergate_config("http://127.0.0.1:9"))
    os.environ["TIERGATE_BENCH_KEY"] = targets.TENANT_KEY
    keyring = KeyRing.from_config(config)
    prefix = targets.pipeline_prefix() + "res"
    store = RedisStore(redis_url)
    keys = RedisKeyStore(store, prefix)
    directory = KeyDirectory(keys, config, keyring)
    raw, record = issue_key("bench", "", KeyScope())
    try:
        await keys.put(record)
        await directory.refresh()

        async def per_call(key: str, n: int, clear: bool) -> float:
            began = time.perf_counter()
            for _ in range(n):
                if clear:
                    directory.changed()
                assert await directory.authenticate(key) is not None
            return (time.perf_counter() - began) * 1e6 / n

        return {
            "yaml_us": await per_call(targets.TENANT_KEY, iterations, False),
            "managed_cached_us": await per_call(raw, iterations, False),
            "managed_miss_us": await per_call(raw, max(iterations // 50, 200), True),
        }
    finally:
        await keys.aclose()
        await store.aclose()
        targets.drop_pipeline_keys(redis_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds, short phases")
    parser.add_argument("--gateway-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/tiergate-bench-keys"))
    args = parser.parse_args(argv)
    args.rounds, args.duration, args.warmup = (3, 2.0, 0.5) if args.quick else (7, 3.0, 0.5)
    started = time.monotonic()
    rows = gateway_rounds(args)
    costs = asyncio.run(resolution_cost(args.redis_url, 20_000 if args.quick else 100_000))
    print(f"\nkeys overhead ({time.monotonic() - started:.0f}s, {args.rounds} rounds)")
    print("phase / key            CPU ms/req median (range)   p50 ms median (range)")
    for name, row in rows.items():
        print(f"{name:22} {_spread(row['cpu']):28} {_spread(row['p50'])}")
    for phase in PHASES:
        managed, yaml_ = rows[f"{phase.name} managed"]["cpu"], rows[f"{phase.name} yaml"]["cpu"]
        ratios = [m / y for m, y in zip(managed, yaml_, strict=True)]
        print(f"{phase.name:8} CPU ratio managed / YAML per round: {_spread(ratios)}")
    print(
        "key resolution per call (this process): "
        f"YAML {costs['yaml_us']:.2f} us, managed cached {costs['managed_cached_us']:.2f} us, "
        f"managed cache miss (one Redis HGET) {costs['managed_miss_us']:.1f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
