"""Per-tenant quotas on what a tenant keeps in the shared store: a count and a byte total
of entries that expire, admitted atomically against caps.

``admit(tenant, entry, size, ttl_s, caps)`` drops the tenant's expired entries, then
admits ``entry`` only if the count and the bytes stay within ``caps`` (an entry admitted
again replaces its old size); ``release`` forgets one; ``usage`` is what the tenant holds
now. On Redis one Lua script per call over the tenant's keys (one hash tag per tenant and
quota: ``{P}:{quota:NAME:TENANT}``): a sorted set of entries by expiry (ms, server time),
a hash of their sizes and the byte total. In process, the same contract in a dict.
Stored Responses use it (``policies.stores.responses``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from policies.stores.store_redis import RedisStore


@dataclass(frozen=True, slots=True)
class Caps:
    count: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Usage:
    count: int
    bytes: int


class QuotaStore(Protocol):
    async def admit(self, tenant: str, entry: str, size: int, ttl_s: float, caps: Caps) -> bool:
        """Whether ``entry`` (``size`` bytes, expiring in ``ttl_s``) fits; kept if so."""
        ...

    async def release(self, tenant: str, entry: str) -> None: ...

    async def usage(self, tenant: str) -> Usage: ...


class MemoryQuotas:
    """One process's quotas: expiry checked on every call."""

    def __init__(self) -> None:
        # tenant -> entry -> (expiry, size)
        self._entries: dict[str, dict[str, tuple[float, int]]] = {}

    def _live(self, tenant: str) -> dict[str, tuple[float, int]]:
        now = time.monotonic()
        entries = self._entries.setdefault(tenant, {})
        for entry in [e for e, (expiry, _) in entries.items() if expiry <= now]:
            del entries[entry]
        return entries

    async def admit(self, tenant: str, entry: str, size: int, ttl_s: float, caps: Caps) -> bool:
        entries = self._live(tenant)
        others = {e: v for e, v in entries.items() if e != entry}
        if len(others) + 1 > caps.count or sum(s for _, s in others.values()) + size > caps.bytes:
            return False
        entries[entry] = (time.monotonic() + ttl_s, size)
        return True

    async def release(self, tenant: str, entry: str) -> None:
        self._live(tenant).pop(entry, None)

    async def usage(self, tenant: str) -> Usage:
        entries = self._live(tenant)
        return Usage(len(entries), sum(size for _, size in entries.values()))


# KEYS: order (zset entry -> expiry ms), sizes (hash entry -> bytes), total (bytes)
_SWEEP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #old > 0 then
  local freed = 0
  for _, e in ipairs(old) do
    freed = freed + tonumber(redis.call('HGET', KEYS[2], e) or '0')
    redis.call('HDEL', KEYS[2], e)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('DECRBY', KEYS[3], freed)
end
"""
# ARGV: entry size ttl_ms max_count max_bytes -> 1 admitted, 0 over a cap
_ADMIT = (
    _SWEEP
    + """
local entry, size = ARGV[1], tonumber(ARGV[2])
local previous = tonumber(redis.call('HGET', KEYS[2], entry) or '-1')
local count = redis.call('ZCARD', KEYS[1])
local held = tonumber(redis.call('GET', KEYS[3]) or '0')
if previous >= 0 then count, held = count - 1, held - previous end
if count + 1 > tonumber(ARGV[4]) or held + size > tonumber(ARGV[5]) then return 0 end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now + ttl, entry)
redis.call('HSET', KEYS[2], entry, size)
redis.call('SET', KEYS[3], held + size)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = math.max(tonumber(last[2]) - now, 1000)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], keep) end
return 1
"""
)
# ARGV: entry
_RELEASE = (
    _SWEEP
    + """
local size = redis.call('HGET', KEYS[2], ARGV[1])
if size then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('DECRBY', KEYS[3], tonumber(size))
end
return 0
"""
)
_USAGE = (
    _SWEEP
    + """
return {redis.call('ZCARD', KEYS[1]), tonumber(redis.call('GET', KEYS[3]) or '0')}
"""
)


class RedisQuotas:
    def __init__(self, store: RedisStore, name: str) -> None:
        self.store, self.name = store, name
        self._admit = store.script(_ADMIT)
        self._release = store.script(_RELEASE)
        self._usage = store.script(_USAGE)

    def _keys(self, tenant: str) -> list[str]:
        base = self.store.keys(f"quota:{self.name}:{tenant}")
        return [f"{base}:order", f"{base}:sizes", f"{base}:total"]

    async def admit(self, tenant: str, entry: str, size: int, ttl_s: float, caps: Caps) -> bool:
        args: list[str | int] = [entry, size, max(int(ttl_s * 1000), 1), caps.count, caps.bytes]
        return bool(await self._admit("quota admit", self._keys(tenant), args))

    async def release(self, tenant: str, entry: str) -> None:
        await self._release("quota release", self._keys(tenant), [entry])

    async def usage(self, tenant: str) -> Usage:
        count, size = await self._usage("quota usage", self._keys(tenant))
        return Usage(int(count), int(size))
