"""Managed keys and runtime tenants on Redis, shared by every replica.

Keys (``P`` = ``{redis_prefix}:{keys}``; one hash tag, so a write and its version bump
are one MULTI on Redis Cluster too; the change notice is published right after it):
  P:by_digest  hash  key digest -> the key's record (JSON)
  P:by_id      hash  key id -> digest
  P:tenants    hash  tenant name -> its policy fields (JSON)
  P:used       hash  key id -> last use (unix seconds), written in batches
  P:version    int   bumped by every write; replicas poll it to drop their caches
  P:changed    pub/sub channel, published with every write: replicas refresh at once
                (the poll is the fallback for a replica that missed a message)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import orjson

from policies.stores.keys import ManagedKey
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore

T = TypeVar("T")

# Takes the max: two replicas flushing out of order never move a key's last use back.
_TOUCH = """
for i = 1, #ARGV, 2 do
  local old = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if tonumber(ARGV[i + 1]) > old then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def keys_prefix(redis_prefix: str) -> str:
    return f"{redis_prefix}:{{keys}}"


class RedisKeyStore:
    def __init__(self, store: RedisStore, prefix: str | None = None) -> None:
        """``prefix``: the ``redis_prefix`` (default: the store owner's root)."""
        self.store = store
        self.redis = store.client
        p = keys_prefix(prefix) if prefix is not None else store.keys("keys")
        self._digests, self._ids = f"{p}:by_digest", f"{p}:by_id"
        self._tenants, self._used, self._version = f"{p}:tenants", f"{p}:used", f"{p}:version"
        self._channel = f"{p}:changed"
        self._touch = store.script(_TOUCH)
        self._reader: Any = None
        self._pubsub: Any = None

    async def _call(self, what: str, work: Awaitable[T]) -> T:
        """Every failure mapped by the store owner (``StoreUnavailable``)."""
        try:
            async with self.store.errors(what):
                return await work
        finally:
            if asyncio.iscoroutine(work):
                work.close()  # never started: the owner refused before awaiting it

    async def version(self) -> int:
        raw = await self._call("get", self.redis.get(self._version))
        return int(raw or 0)

    async def by_digest(self, digest: str) -> ManagedKey | None:
        raw = await self._call("hget", self.redis.hget(self._digests, digest))
        return None if raw is None else ManagedKey.model_validate_json(raw)

    async def get(self, key_id: str) -> ManagedKey | None:
        digest = await self._call("hget", self.redis.hget(self._ids, key_id))
        return None if digest is None else await self.by_digest(_text(digest))

    async def list(self, tenant: str | None = None) -> list[ManagedKey]:
        raw = await self._call("hgetall", self.redis.hgetall(self._digests))
        keys = [ManagedKey.model_validate_json(v) for v in raw.values()]
        return sorted(
            (k for k in keys if tenant is None or k.tenant == tenant), key=lambda k: k.created_at
        )

    async def put(self, key: ManagedKey) -> None:
        async def write() -> None:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._digests, key.digest, key.model_dump_json())
                pipe.hset(self._ids, key.id, key.digest)
                pipe.incr(self._version)
                await pipe.execute()
            await self.redis.publish(self._channel, b"1")  # keyless: outside the MULTI

        await self._call("put key", write())

    async def tenants(self) -> dict[str, dict[str, Any]]:
        raw = await self._call("hgetall", self.redis.hgetall(self._tenants))
        return {_text(name): orjson.loads(value) for name, value in raw.items()}

    async def put_tenant(self, name: str, fields: dict[str, Any]) -> None:
        async def write() -> None:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._tenants, name, orjson.dumps(fields))
                pipe.incr(self._version)
                await pipe.execute()
            await self.redis.publish(self._channel, b"1")  # keyless: outside the MULTI

        await self._call("put tenant", write())

    async def delete_tenant(self, name: str) -> bool:
        async def write() -> bool:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self._tenants, name)
                pipe.incr(self._version)
                removed, _ = await pipe.execute()
            await self.redis.publish(self._channel, b"1")  # keyless: outside the MULTI
            return bool(removed)

        return await self._call("delete tenant", write())

    async def touch(self, used: Mapping[str, float]) -> None:
        if not used:
            return
        args = [part for key_id, ts in used.items() for part in (key_id, repr(ts))]
        await self._touch("touch", [self._used], args)

    async def last_used(self) -> dict[str, float]:
        raw = await self._call("hgetall", self.redis.hgetall(self._used))
        return {_text(k): float(v) for k, v in raw.items()}

    async def wait_change(self, timeout_s: float) -> None:
        """Until a replica announces a write, or ``timeout_s``."""
        try:
            async with self.store.errors("subscribe"):
                if self._pubsub is None:
                    self._reader = self.store.reader()
                    self._pubsub = self._reader.pubsub(ignore_subscribe_messages=True)
                    await self._pubsub.subscribe(self._channel)
                await self._pubsub.get_message(timeout=timeout_s)
        except StoreUnavailable:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        reader, self._reader = self._reader, None
        async with self.store.errors("unsubscribe"):
            if pubsub is not None:
                await pubsub.aclose()
            if reader is not None:
                await reader.aclose()
