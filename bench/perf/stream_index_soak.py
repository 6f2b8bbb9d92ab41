"""Soak of the Redis 7 stream index alone: do replicas' in-memory indexes stay flat while
tenants come and go?

    python -m bench.perf.stream_index_soak                        # 200,000 stores
    python -m bench.perf.stream_index_soak --stores 40000         # a quick look

Two ``StreamIndexStorage`` replicas in this process share a private ``redis-server`` (7.x:
no vector sets). Replica A stores semantic entries (random unit vectors, 384 floats) for
one tenant at a time, ``--per-turn`` of them, then moves to the next of ``--tenants``; a
tenant's turn comes back long after its entries (``--ttl-s``) and its ``order`` set have
lapsed in Redis, which publishes nothing. Replica B follows through the stream. No model
runs, so the stores come fast enough to reach a plateau in a minute (``bench/perf/soak.py
--semantic`` does the same through the whole gateway, at the embedder's pace).

The sync stream is capped at ``--stream-maxlen`` events (approximate trim), reached in
the warm-up. Every ``--sample-every`` stores it records both indexes' sizes, this process' RSS and
Redis ``used_memory``; the summary's growth per store is the least-squares slope after
``--warmup`` stores, in bytes (RSS, Redis) and in index entries. Run it against another
checkout with ``PYTHONPATH=<checkout>`` to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.perf.soak import PrivateRedis, slope
from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.storage import Semantic
from policies.stores.cache.streamindex import StreamIndexStorage
from policies.stores.store_redis import RedisStore


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def unit_vectors(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def soak(url: str, redis: PrivateRedis, args: argparse.Namespace) -> list[dict[str, Any]]:
    tenants = [f"t{i}" for i in range(args.tenants)]
    replicas = [
        StreamIndexStorage(RedisStore(url, timeout_s=5.0), root="soak", maxlen=args.stream_maxlen)
        for _ in range(2)
    ]
    for replica in replicas:
        await replica.start(tenants)
    a, b = replicas
    vectors = unit_vectors(args.per_turn, seed=0)
    samples: list[dict[str, Any]] = []
    began = time.perf_counter()
    try:
        stored = 0
        while stored < args.stores:
            keys = CacheKeys("soak", tenants[(stored // args.per_turn) % len(tenants)])
            for i in range(args.per_turn):
                # one prefix per ten entries, as the guard splits prompts with numbers
                semantic = Semantic(f"p{stored // 10}", "text", vectors[i])
                await a.put(keys, f"d{stored}", b"r" * 200, semantic, args.ttl_s, 10_000)
                stored += 1
                if stored % args.sample_every == 0:
                    await asyncio.sleep(0.3)  # let B catch up before it is counted
                    used, _ = redis.memory()
                    samples.append(
                        {
                            "stores": stored,
                            "elapsed_s": round(time.perf_counter() - began, 1),
                            "index_a": len(a.index),
                            "index_b": len(b.index),
                            "rss_mb": round(rss_mb(), 2),
                            "redis_mb": round(used, 3),
                        }
                    )
                    print("  " + json.dumps(samples[-1]), flush=True)
    finally:
        for replica in replicas:
            await replica.aclose()
    return samples


def summarize(samples: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    after = [s for s in samples if s["stores"] >= warmup]
    out: dict[str, Any] = {"stores": samples[-1]["stores"], "warmup_stores": warmup}
    if len(after) >= 2:
        for name, scale in (("rss_mb", 2**20), ("redis_mb", 2**20), ("index_b", 1)):
            points = [(float(s["stores"]), s[name] * scale) for s in after]
            out[f"{name}_growth_per_store"] = round(slope(points), 3)
        out["index_b_at_warmup"] = after[0]["index_b"]
        out["index_b_end"] = samples[-1]["index_b"]
        out["rss_at_warmup_mb"] = after[0]["rss_mb"]
        out["rss_end_mb"] = samples[-1]["rss_mb"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=int, default=200_000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--per-turn", type=int, default=2000)
    parser.add_argument("--ttl-s", type=float, default=2.0)
    parser.add_argument("--sample-every", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=40_000)
    # Small enough that the stream reaches its cap during warm-up (as bench/perf/soak.py does)
    parser.add_argument("--stream-maxlen", type=int, default=20_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as logs:
        redis = PrivateRedis(Path(logs))
        try:
            samples = asyncio.run(soak(redis.url, redis, args))
        finally:
            redis.stop()
    print(json.dumps({**summarize(samples, args.warmup), "redis_version": redis.version}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
