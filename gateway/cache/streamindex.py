"""Redis 7 (no vector search): vectors live in the entries, each replica searches its own
in-memory copy, and one Redis stream tells every replica what was added or removed.

At start (and after losing Redis) a replica notes the stream's last id, loads every
tenant's live entries, then tails the stream from that id; events are idempotent, so
the overlap is harmless. Events are small (tenant, digest, prefix); a replica reads
the vector from the entry itself. An index that lags only costs hits: a candidate is
always re-read from Redis, and a vanished entry is a miss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from gateway.cache.keys import CacheKeys, stream_key
from gateway.cache.localindex import LocalIndex
from gateway.cache.redisbase import RedisStorageBase, as_vector
from gateway.cache.storage import Candidate, Semantic, TenantUsage, Vector
from policies.store import StoreUnavailable
from policies.store_redis import RedisStore

log = logging.getLogger(__name__)

# How long one XREAD waits for events; also how long closing may take, since a blocked
# XREAD in redis-py does not always give way to cancellation.
BLOCK_MS = 250
BATCH = 500


class StreamIndexStorage(RedisStorageBase):
    kind = "redis-stream"

    def __init__(self, store: RedisStore, *, root: str, maxlen: int) -> None:
        super().__init__(store)
        self.root = root
        self.stream = stream_key(root)
        self.maxlen = maxlen
        self.index = LocalIndex()
        self.applied = 0  # stream events applied by this replica (tests wait on it)
        # XREAD blocks for a while: this connection needs a longer timeout than the cache's.
        self._tail_store = store.sibling(timeout_s=BLOCK_MS / 1000 + 5, max_connections=4)
        self._tail_client: Any = self._tail_store.client
        self._namespaces: list[str] = []
        self._tailer: asyncio.Task[None] | None = None
        self._closing = False

    async def start(self, namespaces: list[str]) -> None:
        await super().start(namespaces)
        self._namespaces = list(namespaces)
        self._tailer = asyncio.create_task(self._tail(), name="tiergate-cache-stream")

    async def _resync(self) -> str:
        """Reload every tenant's entries; returns the stream id to tail from."""
        client = self._tail_client
        last = await client.xrevrange(self.stream, count=1)
        last_id = last[0][0].decode() if last else "0-0"
        fresh = LocalIndex()
        for ns in self._namespaces:
            keys = CacheKeys(self.root, ns)
            digests = [d.decode() for d in await client.zrange(keys.order, 0, -1)]
            await self._load(client, fresh, keys, digests)
        self.index = fresh
        log.info(
            "cache index loaded: %d entries, tailing %s from %s", len(fresh), self.stream, last_id
        )
        return last_id

    async def _load(
        self, client: Any, index: LocalIndex, keys: CacheKeys, digests: list[str]
    ) -> None:
        for start in range(0, len(digests), BATCH):
            batch = digests[start : start + BATCH]
            async with client.pipeline(transaction=False) as pipe:
                for digest in batch:
                    pipe.hmget(keys.entry(digest), "p", "v")
                rows = await pipe.execute()
            for digest, (prefix, vector) in zip(batch, rows, strict=True):
                if prefix and vector:
                    index.add(keys.ns, digest, prefix.decode(), as_vector(vector))

    async def _tail(self) -> None:
        delay = 0.2
        last_id: str | None = None
        while not self._closing:
            try:
                async with self._tail_store.errors("cache stream"):
                    if last_id is None:
                        last_id = await self._resync()
                    reply = await self._tail_client.xread(
                        {self.stream: last_id}, count=BATCH, block=BLOCK_MS
                    )
                    for _, events in reply or ():
                        await self._apply([fields for _, fields in events])
                        last_id = events[-1][0].decode()
                delay = 0.2
            except StoreUnavailable as exc:
                # Events may be lost while Redis is away: reload everything once it is back.
                log.warning("cache stream: %r; resyncing in %.1fs", exc, delay)
                last_id = None
                if self._closing:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _apply(self, events: list[dict[bytes, bytes]]) -> None:
        """Apply events in order; runs of additions load their vectors in one round trip."""
        adds: dict[str, list[str]] = {}

        async def load_adds() -> None:
            for ns, digests in adds.items():
                await self._load(self._tail_client, self.index, CacheKeys(self.root, ns), digests)
            adds.clear()

        for fields in events:
            op = fields.get(b"op", b"").decode()
            ns = fields.get(b"ns", b"").decode()
            if op == "add":
                digest = fields[b"d"].decode()
                # A digest fixes the text and prefix, hence the vector: known means current.
                if not self.index.has(ns, digest):
                    adds.setdefault(ns, []).append(digest)
                continue
            await load_adds()
            if op == "del":
                for digest in fields[b"d"].decode().split(","):
                    self.index.remove(ns, digest)
            elif op == "flush":
                self.index.clear(ns)
        await load_adds()
        self.applied += len(events)

    async def after_put(
        self, keys: CacheKeys, digest: str, semantic: Semantic | None, gone: list[str]
    ) -> None:
        for old in gone:
            self.index.remove(keys.ns, old)
        if semantic is not None:
            self.index.add(keys.ns, digest, semantic.prefix, semantic.vector)

        async def publish() -> None:
            async with self.redis.pipeline(transaction=False) as pipe:
                if gone:
                    pipe.xadd(
                        self.stream,
                        {"op": "del", "ns": keys.ns, "d": ",".join(gone)},
                        maxlen=self.maxlen,
                        approximate=True,
                    )
                if semantic is not None:
                    pipe.xadd(
                        self.stream,
                        {"op": "add", "ns": keys.ns, "d": digest},
                        maxlen=self.maxlen,
                        approximate=True,
                    )
                await pipe.execute()

        if gone or semantic is not None:
            await self.call("publish", publish)

    async def candidates(
        self, keys: CacheKeys, prefix: str, vector: Vector, count: int
    ) -> list[Candidate]:
        near = await self.index.search(keys.ns, prefix, vector, count)
        digests = [d for d, _ in near]
        found = await self.fetch(keys, digests)
        live = {c.digest for c in found}
        for digest in digests:
            if digest not in live:
                self.index.remove(keys.ns, digest)  # expired in Redis
        return found

    async def flush(self, keys: CacheKeys) -> int:
        removed = await super().flush(keys)
        self.index.clear(keys.ns)
        await self.call(
            "publish",
            lambda: self.redis.xadd(
                self.stream, {"op": "flush", "ns": keys.ns}, maxlen=self.maxlen, approximate=True
            ),
        )
        return removed

    async def usage(self, keys: CacheKeys) -> TenantUsage:
        stored = await super().usage(keys)
        local = self.index.count(keys.ns)
        return TenantUsage(stored.entries, stored.memory_bytes, index_bytes=local * 384 * 4)

    async def aclose(self) -> None:
        self._closing = True
        if self._tailer is not None:
            await asyncio.wait({self._tailer}, timeout=BLOCK_MS / 1000 + 1)
            self._tailer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({self._tailer}, timeout=1)
        try:
            await self._tail_store.aclose()
        finally:
            await super().aclose()
