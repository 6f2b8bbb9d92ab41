"""Reservation + settle overhead per request, against a real Redis.

Per request: one ``reserve`` over three scopes (global, tenant, key) and one ``settle``
that also appends the spend event, i.e. the two round trips the gateway adds.
Baseline, measured in the same run on the same connection pool: two ``PING`` round
trips, the floor of any two-call scheme. Each round times ``--requests`` requests one
after another (latency), then the same number with ``--concurrency`` in flight.

    /work/main/.venv/bin/python -m bench.perf.budget_overhead --requests 2000 --rounds 5
    # on a Redis Cluster (any node's URL): every budget key is in the {ledger} slot
    .venv/bin/python -m bench.perf.budget_overhead --redis redis://127.0.0.1:7000 --cluster
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from policies.schema import BudgetSpec
from policies.stores.budget import GLOBAL_SCOPE, Reservation, Scope, key_scope, tenant_scope
from policies.stores.budget_memory import MemoryBudgetStore
from policies.stores.budget_redis import RedisBudgetStore
from policies.stores.ledger import MemoryLedger, SpendEvent
from policies.stores.ledger_redis import RedisLedger
from policies.stores.store_redis import RedisStore

SCOPES = [
    Scope(GLOBAL_SCOPE, BudgetSpec(limit_usd=1e9, window="monthly")),
    Scope(tenant_scope("bench"), BudgetSpec(limit_usd=1e6, window="daily")),
    Scope(key_scope("bench", "k1"), None),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def event(rid: str) -> SpendEvent:
    return SpendEvent(
        ts=time.time(), request_id=rid, tenant="bench", key_id="k1", tier="small",
        model="m", prompt_tokens=120, completion_tokens=80, cost_usd=2e-5,
        saved_routing_usd=1e-4,
    )  # fmt: skip


Op = Callable[[str], Awaitable[None]]


async def timed(op: Op, count: int, concurrency: int) -> list[float]:
    """Per-request latencies (ms) with ``concurrency`` requests in flight."""
    latencies: list[float] = []
    queue = iter(range(count))

    async def worker() -> None:
        for _ in queue:
            rid = uuid.uuid4().hex
            started = time.perf_counter()
            await op(rid)
            latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def run(url: str, requests: int, rounds: int, concurrency: int, cluster: bool) -> None:
    prefix = f"tgbench-{uuid.uuid4().hex[:10]}"
    pool = max(concurrency, 8)
    store = RedisStore(url, root=prefix, cluster=cluster, timeout_s=5.0, max_connections=pool)
    budgets = RedisBudgetStore(RedisLedger(store))
    memory = MemoryBudgetStore(MemoryLedger(max_events=1000))

    async def ping_twice(rid: str) -> None:
        await store.client.ping()
        await store.client.ping()

    def reserve_settle(target: RedisBudgetStore | MemoryBudgetStore) -> Op:
        async def op(rid: str) -> None:
            held = await target.reserve(rid, SCOPES, [1e-4, 1e-5])
            assert isinstance(held, Reservation)
            await target.settle(held, 2e-5, event(rid))

        return op

    ops: dict[str, Op] = {
        "baseline 2x PING": ping_twice,
        "reserve+settle (redis)": reserve_settle(budgets),
        "reserve+settle (memory)": reserve_settle(memory),
    }
    await timed(ops["reserve+settle (redis)"], 200, 1)  # load the scripts, warm the pool
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        for _ in range(rounds):
            for name, op in ops.items():
                for inflight in (1, concurrency):
                    latencies = await timed(op, requests, inflight)
                    results.setdefault((name, inflight), []).append(
                        (percentile(latencies, 0.5), percentile(latencies, 0.99))
                    )
        print(f"{requests} requests x {rounds} rounds; median of rounds [min-max], ms")
        print(f"{'operation':28} {'in flight':>9} {'p50':>22} {'p99':>22}")
        for (name, inflight), rows in results.items():
            p50s, p99s = [r[0] for r in rows], [r[1] for r in rows]
            print(
                f"{name:28} {inflight:>9} "
                f"{statistics.median(p50s):8.3f} [{min(p50s):.3f}-{max(p50s):.3f}] "
                f"{statistics.median(p99s):8.3f} [{min(p99s):.3f}-{max(p99s):.3f}]"
            )
        for inflight in (1, concurrency):
            base = statistics.median(r[0] for r in results[("baseline 2x PING", inflight)])
            ours = statistics.median(r[0] for r in results[("reserve+settle (redis)", inflight)])
            print(f"p50 ratio reserve+settle / 2x PING at {inflight} in flight: {ours / base:.2f}")
        print(f"holds left: {await budgets.active_holds()}")
    finally:
        keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*")]
        await store.delete(*(k.decode() for k in keys))
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--cluster", action="store_true", help="--redis is a cluster node")
    args = parser.parse_args()
    asyncio.run(run(args.redis, args.requests, args.rounds, args.concurrency, args.cluster))


if __name__ == "__main__":
    main()
