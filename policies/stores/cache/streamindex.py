"""Redis 7 (no vector search): vectors live in the entries, each replica searches its own
in-memory copy, and one Redis stream tells every replica what was added or removed.

At start (and after losing Redis) a replica notes the stream's last id, loads every
tenant's live entries, then tails the stream from that id; events are idempotent, so
the overlap is harmless. Events are small (tenant, digest, replica); a replica reads
the vector, and the entry's expiry time (``PEXPIRETIME``), from the entry itself and
skips its own events. An index that lags only costs hits: a candidate is always re-read
from Redis, and a vanished entry is a miss.

Entries also expire without any event (a tenant that stops storing lets its whole set
lapse), so each vector keeps its entry's expiry time and the tail loop drops, after every
read, at most ``SWEEP`` of those past due (plus ``expiry_grace_s`` for clock skew between
replicas and Redis): the index holds what is live in Redis, however tenants come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable
from typing import Any

from policies.stores.cache.keys import CacheKeys, stream_key
from policies.stores.cache.localindex import LocalIndex
from policies.stores.cache.redisbase import RedisStorageBase, as_vector
from policies.stores.cache.storage import Candidate, Semantic, TenantUsage, Vector
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore

log = logging.getLogger(__name__)

# How long one XREAD waits for events; also how long closing may take, since a blocked
# XREAD in redis-py does not always give way to cancellation.
BLOCK_MS = 250
BATCH = 500
# Expiry times looked at per tail read: twice the most additions one read can bring, so
# the sweep keeps up with any rate of stores.
SWEEP = 2 * BATCH
EXPIRY_GRACE_S = 5.0


class StreamIndexStorage(RedisStorageBase):
    kind = "redis-stream"

    def __init__(
        self,
        store: RedisStore,
        *,
        root: str,
        maxlen: int,
        expiry_grace_s: float = EXPIRY_GRACE_S,
    ) -> None:
        super().__init__(store)
        self.root = root
        self.stream = stream_key(root)
        self.maxlen = maxlen
        self.expiry_grace_s = expiry_grace_s
        self.index = LocalIndex()
        self.replica = secrets.token_hex(8)  # marks this replica's own events
        self.applied = 0  # stream events applied by this replica (tests wait on it)
        self.expired = 0  # vectors dropped because their entry's time ran out
        # XREAD blocks for a while: this connection needs a longer timeout than the cache's.
        self._tail_store = store.sibling(
            timeout_s=BLOCK_MS / 1000 + 5, max_connections=4, blocking=True
        )
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
                    pipe.pexpiretime(keys.entry(digest))
                rows = await pipe.execute()
            for i, digest in enumerate(batch):
                (prefix, vector), expires_ms = rows[2 * i], int(rows[2 * i + 1])
                if prefix and vector:
                    expires = expires_ms / 1000 if expires_ms > 0 else None
                    index.add(keys.ns, digest, prefix.decode(), as_vector(vector), expires)

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
                self.expired += self.index.expire(time.time() - self.expiry_grace_s, SWEEP)
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
                # Another replica's store may have renewed an entry known here: load it for
                # its expiry time. Our own are in the index, unless a resync replaced it.
                own = fields.get(b"r", b"").decode() == self.replica
                if not (own and self.index.has(ns, digest)):
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
        self,
        keys: CacheKeys,
        digest: str,
        semantic: Semantic | None,
        gone: list[str],
        ttl_s: float,
    ) -> None:
        for old in gone:
            self.index.remove(keys.ns, old)
        if semantic is not None:
            expires = time.time() + ttl_s
            self.index.add(keys.ns, digest, semantic.prefix, semantic.vector, expires)

        # Single commands, not a pipeline of their own: with ``redis_pipelining`` each
        # shares its turn's round trip with the other requests' commands.
        if gone:
            await self.call(
                "publish", lambda: self._publish({"op": "del", "ns": keys.ns, "d": ",".join(gone)})
            )
        if semantic is not None:
            event = {"op": "add", "ns": keys.ns, "d": digest, "r": self.replica}
            await self.call("publish", lambda: self._publish(event))

    def _publish(self, event: dict[str, str]) -> Awaitable[Any]:
        sent: Awaitable[Any] = self.redis.xadd(
            self.stream, event, maxlen=self.maxlen, approximate=True
        )
        return sent

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

    async def remove(self, keys: CacheKeys, digest: str) -> str | None:
        """Evict here, and tell every other replica's index (a ``del`` event)."""
        text = await super().remove(keys, digest)
        self.index.remove(keys.ns, digest)
        await self.call(
            "publish",
            lambda: self._publish({"op": "del", "ns": keys.ns, "d": digest}),
        )
        return text

    async def flush(self, keys: CacheKeys) -> int:
        removed = await super().flush(keys)
        self.index.clear(keys.ns)
        await self.call(
            "publish",
            lambda: self._publish({"op": "flush", "ns": keys.ns}),
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
