"""What both Redis storages share: the cache's own client, entries, eviction and flush.

An entry is a hash (``r`` record, ``p`` prefix, ``t`` text, ``v`` float32 vector) with
a TTL, listed in the tenant's ``order`` sorted set. One Lua script stores an entry and
evicts expired and surplus ones atomically; it returns what it evicted, so an index
outside the script can follow.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np

from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.storage import CacheUnavailable, Candidate, Semantic, TenantUsage, Vector
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore

T = TypeVar("T")
log = logging.getLogger(__name__)

# KEYS: entry, order, vector set.  ARGV: digest, record, prefix, text, vector, ttl_ms,
# max_entries, use_vset, entry key prefix.  Store times are the server's (``TIME``).
PUT_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local digest, ttl, cap = ARGV[1], tonumber(ARGV[6]), tonumber(ARGV[7])
local use_vset, entry_prefix = ARGV[8] == '1', ARGV[9]
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'r', ARGV[2], 'p', ARGV[3], 't', ARGV[4], 'v', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'r', ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], now, digest)
redis.call('PEXPIRE', KEYS[2], ttl)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local over = redis.call('ZCARD', KEYS[2]) - cap
if over > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #popped, 2 do gone[#gone + 1] = popped[i] end
end
for _, d in ipairs(gone) do
  redis.call('UNLINK', entry_prefix .. d)
  if use_vset then redis.call('VREM', KEYS[3], d) end
end
if use_vset and ARGV[3] ~= '' then
  redis.call('VADD', KEYS[3], 'FP32', ARGV[5], digest, 'SETATTR', cjson.encode({p = ARGV[3]}))
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return gone
"""

# KEYS: order, vector set.  ARGV: entry key prefix.
FLUSH_SCRIPT = """
local digests = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #digests, 500 do
  local batch = {}
  for j = i, math.min(i + 499, #digests) do batch[#batch + 1] = ARGV[1] .. digests[j] end
  redis.call('UNLINK', unpack(batch))
end
redis.call('UNLINK', KEYS[1], KEYS[2])
return #digests
"""


# KEYS: entry, order, vector set.  ARGV: digest, use_vset.  Returns the entry's compared
# text ("" when it had none), or nil when the entry did not exist.
REMOVE_SCRIPT = """
local text = redis.call('HGET', KEYS[1], 't')
local existed = redis.call('UNLINK', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[2] == '1' then redis.call('VREM', KEYS[3], ARGV[1]) end
if existed == 0 then return false end
return text or ''
"""
STATS_TTL_S = 30 * 86_400  # figures of a tenant idle this long lapse


def as_vector(raw: bytes) -> Vector:
    return np.frombuffer(raw, dtype=np.float32)


class RedisStorageBase:
    kind = "redis"
    use_vector_set = False

    def __init__(self, store: RedisStore) -> None:
        """``store``: the cache's own owner (``RedisStore.sibling`` with the cache's short
        timeout: a slow cache must not hold a request)."""
        self.store = store
        self.redis = store.client
        self._put = store.script(PUT_SCRIPT)
        self._flush = store.script(FLUSH_SCRIPT)
        self._remove = store.script(REMOVE_SCRIPT)

    async def call(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        return await self.store.call(f"cache {what}", make, error=CacheUnavailable)

    async def start(self, namespaces: list[str]) -> None:
        try:
            await self.store.connect()
        except StoreUnavailable as exc:  # the cache will retry on its own; say so
            log.warning("cache store not reachable at start: %s", exc)

    async def get(self, keys: CacheKeys, digest: str) -> bytes | None:
        value = await self.call("get", lambda: self.redis.hget(keys.entry(digest), "r"))
        assert value is None or isinstance(value, bytes)
        return value

    async def put(
        self,
        keys: CacheKeys,
        digest: str,
        record: bytes,
        semantic: Semantic | None,
        ttl_s: float,
        max_entries: int,
    ) -> None:
        args: list[str | int | float | bytes] = [
            digest,
            record,
            semantic.prefix if semantic else "",
            semantic.text if semantic else "",
            semantic.vector.astype(np.float32).tobytes() if semantic else b"",
            max(int(ttl_s * 1000), 1),
            max_entries,
            "1" if self.use_vector_set else "0",
            keys.entry(""),
        ]
        put_keys = [keys.entry(digest), keys.order, keys.vectors]
        gone = await self._put("cache put", put_keys, args, error=CacheUnavailable)
        await self.after_put(keys, digest, semantic, [d.decode() for d in gone], ttl_s)

    async def after_put(
        self,
        keys: CacheKeys,
        digest: str,
        semantic: Semantic | None,
        gone: list[str],
        ttl_s: float,
    ) -> None:
        return None

    async def fetch(self, keys: CacheKeys, digests: list[str]) -> list[Candidate]:
        """The live entries among ``digests``, in that order."""
        if not digests:
            return []

        async def run() -> list[Any]:
            async with self.redis.pipeline(transaction=False) as pipe:
                for digest in digests:
                    pipe.hmget(keys.entry(digest), "r", "t", "v")
                result: list[Any] = await pipe.execute()
                return result

        rows = await self.call("fetch", run)
        found: list[Candidate] = []
        for digest, (record, text, vector) in zip(digests, rows, strict=True):
            if record is not None and text is not None and vector:
                found.append(Candidate(digest, record, text.decode(), as_vector(vector)))
        return found

    async def remove(self, keys: CacheKeys, digest: str) -> str | None:
        script_keys = [keys.entry(digest), keys.order, keys.vectors]
        args = [digest, "1" if self.use_vector_set else "0"]
        text = await self._remove("cache remove", script_keys, args, error=CacheUnavailable)
        if text is None:
            return None
        return text.decode() if isinstance(text, bytes) else str(text)

    async def add_stats(self, keys: CacheKeys, fields: dict[str, float]) -> None:
        async def run() -> None:
            async with self.redis.pipeline(transaction=False) as pipe:
                for name, value in fields.items():
                    pipe.hincrbyfloat(keys.stats, name, value)
                pipe.expire(keys.stats, STATS_TTL_S)
                await pipe.execute()

        await self.call("stats", run)

    async def read_stats(self, keys: CacheKeys) -> dict[str, float]:
        raw = await self.call("stats", lambda: self.redis.hgetall(keys.stats))
        return {k.decode(): float(v) for k, v in raw.items()}

    async def add_label(self, keys: CacheKeys, label: bytes, cap: int) -> None:
        async def run() -> None:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.lpush(keys.labels, label)
                pipe.ltrim(keys.labels, 0, cap - 1)
                await pipe.execute()

        await self.call("label", run)

    async def labels(self, keys: CacheKeys, count: int) -> list[bytes]:
        rows = await self.call("labels", lambda: self.redis.lrange(keys.labels, 0, count - 1))
        return [bytes(r) for r in rows]

    async def flush(self, keys: CacheKeys) -> int:
        flush_keys = [keys.order, keys.vectors]
        removed = await self._flush("cache flush", flush_keys, [keys.entry("")], CacheUnavailable)
        return int(removed)

    async def usage(self, keys: CacheKeys) -> TenantUsage:
        """Entry count exactly; memory from Redis' own accounting of a sample of entries."""

        async def run() -> TenantUsage:
            count = int(await self.redis.zcard(keys.order))
            sample = await self.redis.zrandmember(keys.order, 32) or []
            sizes = [
                int(await self.redis.memory_usage(keys.entry(d.decode())) or 0) for d in sample
            ]
            live = [s for s in sizes if s]
            per_entry = sum(live) / len(live) if live else 0.0
            overhead = 0
            for key in (keys.order, keys.vectors):
                overhead += int(await self.redis.memory_usage(key) or 0)
            return TenantUsage(entries=count, memory_bytes=int(per_entry * count) + overhead)

        return await self.call("usage", run)

    async def aclose(self) -> None:
        await self.store.aclose()
