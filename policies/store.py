"""The state seam: a small async key-value contract, on Redis or in this process.

Everything replicas share (caches, budgets, rate-limit windows, the ledger) goes
through a ``Store``. ``MemoryStore`` keeps the same contract for a single process;
it is atomic because every method runs to completion on the event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

log = logging.getLogger(__name__)


class StoreUnavailable(Exception):
    """The store did not answer (down, or slower than its timeout)."""


class Store(Protocol):
    kind: str

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None: ...

    async def delete(self, *keys: str) -> int: ...

    async def incrbyfloat(self, key: str, amount: float) -> float: ...

    async def hincrbyfloat(self, key: str, field: str, amount: float) -> float: ...

    async def hgetall(self, key: str) -> dict[str, bytes]: ...

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...


class MemoryStore:
    """Single-process store; expiry is checked lazily on read."""

    kind = "memory"

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}
        self._hashes: dict[str, dict[str, bytes]] = {}
        self._expiry: dict[str, float] = {}

    def _alive(self, key: str) -> bool:
        deadline = self._expiry.get(key)
        if deadline is not None and deadline <= time.monotonic():
            self._values.pop(key, None)
            self._hashes.pop(key, None)
            del self._expiry[key]
            return False
        return True

    async def get(self, key: str) -> bytes | None:
        return self._values.get(key) if self._alive(key) else None

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        self._values[key] = value
        if ttl_s is None:
            self._expiry.pop(key, None)
        else:
            self._expiry[key] = time.monotonic() + ttl_s

    async def delete(self, *keys: str) -> int:
        removed = 0
        for key in keys:
            alive = self._alive(key)
            found = self._values.pop(key, None) is not None
            found = (self._hashes.pop(key, None) is not None) or found
            self._expiry.pop(key, None)
            removed += int(found and alive)
        return removed

    async def incrbyfloat(self, key: str, amount: float) -> float:
        current = float(await self.get(key) or b"0")
        value = current + amount
        self._values[key] = repr(value).encode()
        return value

    async def hincrbyfloat(self, key: str, field: str, amount: float) -> float:
        fields = self._hashes.setdefault(key, {}) if self._alive(key) else {}
        self._hashes[key] = fields
        value = float(fields.get(field, b"0")) + amount
        fields[field] = repr(value).encode()
        return value

    async def hgetall(self, key: str) -> dict[str, bytes]:
        return dict(self._hashes.get(key, {})) if self._alive(key) else {}

    async def ping(self) -> bool:
        return True

    async def aclose(self) -> None:
        self._values.clear()
        self._hashes.clear()
        self._expiry.clear()


class RedisStore:
    """Pooled ``redis.asyncio``; connection errors and timeouts become ``StoreUnavailable``."""

    kind = "redis"

    def __init__(self, url: str, *, timeout_s: float = 0.5, max_connections: int = 64) -> None:
        import redis.asyncio as aioredis

        self.url = url
        # A blocking pool: a burst waits briefly for a connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            health_check_interval=30,
        )
        self.redis = aioredis.Redis(connection_pool=pool)

    async def _call(self, method: str, *args: object, **kwargs: object) -> object:
        from redis.exceptions import ConnectionError, TimeoutError

        try:
            return await getattr(self.redis, method)(*args, **kwargs)
        except (ConnectionError, TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"redis {method}: {exc}") from exc

    async def get(self, key: str) -> bytes | None:
        value = await self._call("get", key)
        assert value is None or isinstance(value, bytes)
        return value

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        px = None if ttl_s is None else max(int(ttl_s * 1000), 1)
        await self._call("set", key, value, px=px)

    async def delete(self, *keys: str) -> int:
        return int(await self._call("delete", *keys)) if keys else 0  # type: ignore[call-overload]

    async def incrbyfloat(self, key: str, amount: float) -> float:
        return float(await self._call("incrbyfloat", key, amount))  # type: ignore[arg-type]

    async def hincrbyfloat(self, key: str, field: str, amount: float) -> float:
        return float(await self._call("hincrbyfloat", key, field, amount))  # type: ignore[arg-type]

    async def hgetall(self, key: str) -> dict[str, bytes]:
        raw = await self._call("hgetall", key)
        assert isinstance(raw, Mapping)
        return {k.decode(): v for k, v in raw.items()}

    async def ping(self) -> bool:
        try:
            return bool(await self._call("ping"))
        except StoreUnavailable:
            return False

    async def aclose(self) -> None:
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()


def open_store(
    redis_url: str | None, *, timeout_s: float = 0.5, max_connections: int = 64
) -> Store:
    if redis_url:
        return RedisStore(redis_url, timeout_s=timeout_s, max_connections=max_connections)
    log.warning(
        "no redis_url configured: state lives in this process only "
        "(caches, budgets and rate limits are NOT shared between replicas)"
    )
    return MemoryStore()
