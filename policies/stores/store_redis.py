"""The one owner of the Redis connection: one server or a Redis Cluster, one error mapping.

Every Redis call of every sub-store (budgets, rate limits, ledger, cache, sessions,
reload notices) goes through ``RedisStore.call`` or a ``Script`` it registered, so
every failure — connection refused, timeout, ``OOM`` under ``maxmemory``, ``READONLY``
on a replica, ``BUSY`` script, cluster down / slot not covered, a pool exhausted —
becomes ``StoreUnavailable`` here and nowhere else. Sub-stores get their key prefix
from ``keys()``; the hash tag in it keeps each multi-key script inside one slot.

On one server, single commands issued in the same turn of the event loop share one
pipeline (``redis_pipelining``, on by default: ``policies/stores/redis_coalesce.py``);
blocking readers get a client of their own (``sibling(blocking=True)``).

On a cluster (``redis_cluster: true``) the URL is any seed node; pub/sub uses classic
``PUBLISH``, which a cluster delivers to the subscribers of every node.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from policies.stores.store import StoreUnavailable, key_prefix

T = TypeVar("T")


def redis_failures() -> tuple[type[BaseException], ...]:
    """Every exception a Redis call may raise that means "the store did not do it"."""
    from redis.exceptions import RedisClusterException, RedisError

    return (RedisError, RedisClusterException, OSError, asyncio.TimeoutError)


def _unavailable(error: type[StoreUnavailable], what: str, exc: BaseException) -> StoreUnavailable:
    """The one mapping's result: ``error`` naming the call and what Redis raised."""
    return error(f"redis {what}: {type(exc).__name__}: {exc}")  # redis 8's repr has no words


def _client(
    url: str, *, cluster: bool, timeout_s: float, max_connections: int, coalesce: bool
) -> Any:
    if cluster:
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(
            url,
            max_connections=max_connections,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
        )
    import redis.asyncio as aioredis

    # A blocking pool: a burst waits briefly for a connection instead of failing.
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=30,
    )
    if not coalesce:
        return aioredis.Redis(connection_pool=pool)
    from policies.stores.redis_coalesce import CoalescingRedis

    return CoalescingRedis(connection_pool=pool)


class RedisStore:
    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        root: str = "tg",
        cluster: bool = False,
        timeout_s: float = 0.5,
        max_connections: int = 64,
        coalesce: bool = True,
    ) -> None:
        self.url = url
        self.root = root
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.coalesce = coalesce
        self.client = _client(
            url,
            cluster=cluster,
            timeout_s=timeout_s,
            max_connections=max_connections,
            coalesce=coalesce,
        )
        # A cluster client fails at once when a node's pool is full; waiting here for a
        # free slot gives it the blocking pool's behaviour.
        self._slots = asyncio.Semaphore(max_connections) if cluster else None
        # redis-py's cluster client breaks when its first commands race to discover the
        # topology: the first call discovers it alone.
        self._discovered = not cluster
        self._discovering = asyncio.Lock()

    def keys(self, name: str, tag: str | None = None) -> str:
        return key_prefix(self.root, name, tag)

    def sibling(
        self, *, timeout_s: float, max_connections: int | None = None, blocking: bool = False
    ) -> RedisStore:
        """Another owner on the same server with its own pool and timeouts (the cache's
        short ones, a blocking reader's long ones: ``blocking``, its commands are not
        pipelined with others); the same error mapping."""
        return RedisStore(
            self.url,
            root=self.root,
            cluster=self.cluster,
            timeout_s=timeout_s,
            max_connections=max_connections or self.max_connections,
            coalesce=self.coalesce and not blocking,
        )

    @asynccontextmanager
    async def errors(
        self, what: str, error: type[StoreUnavailable] = StoreUnavailable
    ) -> AsyncIterator[None]:
        """The one mapping: any Redis failure inside becomes ``error`` (a StoreUnavailable)."""
        try:
            if not self._discovered:
                async with self._discovering:
                    if not self._discovered:
                        await self.client.initialize()
                        self._discovered = True
            if self._slots is None:
                yield
            else:
                async with asyncio.timeout(self.timeout_s):
                    await self._slots.acquire()
                try:
                    yield
                finally:
                    self._slots.release()
        except redis_failures() as exc:
            raise _unavailable(error, what, exc) from exc

    async def call(
        self,
        what: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        error: type[StoreUnavailable] = StoreUnavailable,
        **kwargs: Any,
    ) -> T:
        """``await fn(*args, **kwargs)`` (a client method, or a function running a pipeline)
        with every failure mapped."""
        if self._slots is not None or not self._discovered:  # a cluster's slots and topology
            async with self.errors(what, error):
                return await fn(*args, **kwargs)
        try:  # one server: ``errors`` without a context manager around every command
            return await fn(*args, **kwargs)
        except redis_failures() as exc:
            raise _unavailable(error, what, exc) from exc

    async def connect(self) -> None:
        """Reach the server now (on a cluster: learn its slots), so that the first real
        call does not pay for it (the cache's calls have a short timeout)."""
        await self.call("connect", self.client.ping)

    async def has_command(self, *probe: str) -> bool:
        """Whether the server knows the command ``probe`` runs (a harmless read, e.g.
        ``VCARD`` of a key nobody writes); on a cluster every node runs the same server."""
        from redis.exceptions import ResponseError

        async with self.errors(f"probe {probe[0]}"):
            try:
                await self.client.execute_command(*probe)
            except ResponseError as exc:
                if "unknown command" not in str(exc).lower():
                    raise
                return False
        return True

    def script(self, lua: str) -> Script:
        return Script(self, lua)

    async def get(self, key: str) -> bytes | None:
        value = await self.call("get", self.client.get, key)
        assert value is None or isinstance(value, bytes)
        return value

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        px = None if ttl_s is None else max(int(ttl_s * 1000), 1)
        await self.call("set", self.client.set, key, value, px=px)

    async def delete(self, *keys: str) -> int:
        if not keys:
            return 0
        if self.cluster:  # one DEL per key: they may live on different nodes
            done = [await self.call("delete", self.client.delete, key) for key in keys]
            return sum(int(d) for d in done)
        return int(await self.call("delete", self.client.delete, *keys))

    async def incrbyfloat(self, key: str, amount: float) -> float:
        return float(await self.call("incrbyfloat", self.client.incrbyfloat, key, amount))

    async def hincrbyfloat(self, key: str, field: str, amount: float) -> float:
        return float(await self.call("hincrbyfloat", self.client.hincrbyfloat, key, field, amount))

    async def hgetall(self, key: str) -> dict[str, bytes]:
        raw = await self.call("hgetall", self.client.hgetall, key)
        assert isinstance(raw, Mapping)
        return {k.decode(): v for k, v in raw.items()}

    async def server_time(self) -> float:
        seconds, micros = await self.call("time", self.client.time)
        return int(seconds) + int(micros) / 1_000_000

    async def publish(self, channel: str, message: bytes) -> int:
        return int(await self.call("publish", self.client.publish, channel, message))

    def reader(self) -> Any:
        """A plain client of its own (the seed node on a cluster, no read timeout) for
        pub/sub and blocking reads; use it inside ``errors()`` and close it."""
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(self.url, socket_connect_timeout=self.timeout_s)

    @asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """A connection of its own (to the seed node on a cluster), no read timeout."""
        reader = self.reader()
        pubsub = reader.pubsub(ignore_subscribe_messages=True)
        try:
            await self.call("subscribe", pubsub.subscribe, channel)

            async def messages() -> AsyncIterator[bytes]:
                while True:
                    async with self.errors("pubsub"):
                        found = await pubsub.get_message(timeout=1.0)
                    if found is not None and found["type"] == "message":
                        yield bytes(found["data"])

            yield messages()
        finally:
            async with self.errors("unsubscribe"):
                await pubsub.aclose()
                await reader.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self.call("ping", self.client.ping))
        except StoreUnavailable:
            return False

    async def aclose(self) -> None:
        async with self.errors("close"):
            await self.client.aclose()
            if not self.cluster:
                await self.client.connection_pool.disconnect()


class Script:
    """A Lua script run by its digest, loaded on the node that lacks it (``NOSCRIPT``:
    Redis 8 keeps no ``EVAL``-sent script, so a plain ``EVAL`` fallback would run every call
    uncached).

    The ``#!lua`` line (Redis 7 script flags, none given) makes the server refuse the
    whole script up front when it is out of memory or read-only, instead of letting it
    run until its first refused write: a script runs entirely or not at all."""

    def __init__(self, store: RedisStore, lua: str) -> None:
        self.store = store
        self.lua = "#!lua\n" + lua
        self.sha = hashlib.sha1(self.lua.encode()).hexdigest()

    async def __call__(
        self,
        what: str,
        keys: Sequence[str],
        args: Sequence[str | int | float | bytes] = (),
        error: type[StoreUnavailable] = StoreUnavailable,
    ) -> Any:
        return await self.store.call(what, self._run, keys, args, error=error)

    async def _run(self, keys: Sequence[str], args: Sequence[str | int | float | bytes]) -> Any:
        client = self.store.client
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except _no_script():
            await client.script_load(self.lua)  # on a cluster: on every primary
            return await client.evalsha(self.sha, len(keys), *keys, *args)


@functools.cache
def _no_script() -> type[Exception]:
    from redis.exceptions import NoScriptError

    return NoScriptError
