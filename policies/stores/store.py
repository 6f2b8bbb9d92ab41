"""The state seam: a small async key-value contract, on Redis or in this process.

Everything replicas share (caches, budgets, rate-limit windows, the ledger, admin
sessions, policy-reload notices) goes through one ``Store``, the owner of the
connection. It hands each typed sub-store its key prefix (``store.keys("budget")``),
and on Redis it maps every Redis error, in one place, to ``StoreUnavailable``.
``MemoryStore`` keeps the same contract for a single process; it is atomic because
every method runs to completion on the event loop.

Implementations: ``MemoryStore`` here, ``RedisStore`` (one server or a Redis Cluster)
in ``policies/stores/store_redis.py``; ``policies/stores/factories.py`` picks one from the YAML.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol


class StoreUnavailable(Exception):
    """The store did not do what was asked: down, slower than its timeout, out of memory,
    read-only, busy, a cluster fault. Callers treat every one the same way."""


def key_prefix(root: str, name: str, tag: str | None = None) -> str:
    """``root:{name}``, or ``root:{tag}:name`` for a sub-store that must share a slot with
    another (the budget with the ledger it settles into). The hash tag puts every key of
    one sub-store in one Redis Cluster slot, so its Lua scripts may touch them together."""
    return f"{root}:{{{name}}}" if tag is None else f"{root}:{{{tag}}}:{name}"


class Store(Protocol):
    kind: str  # the registry key of the implementations built on it: memory | redis
    root: str  # every key this deployment writes starts with it (``redis_prefix``)
    cluster: bool

    def keys(self, name: str, tag: str | None = None) -> str:
        """The key prefix of the sub-store ``name`` (see ``key_prefix``)."""
        ...

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None: ...

    async def delete(self, *keys: str) -> int: ...

    async def incrbyfloat(self, key: str, amount: float) -> float: ...

    async def hincrbyfloat(self, key: str, field: str, amount: float) -> float: ...

    async def hgetall(self, key: str) -> dict[str, bytes]: ...

    async def server_time(self) -> float:
        """The store's clock (Redis ``TIME``): one clock for every replica."""
        ...

    async def publish(self, channel: str, message: bytes) -> int:
        """Send ``message`` to every subscriber of ``channel`` (every replica)."""
        ...

    def subscribe(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """``async with store.subscribe(ch) as messages: async for m in messages: ...``;
        subscribed once the ``async with`` is entered."""
        ...

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...


class MemoryStore:
    """Single-process store; expiry is checked lazily on read."""

    kind = "memory"
    cluster = False

    def __init__(self, root: str = "tg") -> None:
        self.root = root
        self._values: dict[str, bytes] = {}
        self._hashes: dict[str, dict[str, bytes]] = {}
        self._expiry: dict[str, float] = {}
        self._channels: dict[str, set[asyncio.Queue[bytes]]] = {}

    def keys(self, name: str, tag: str | None = None) -> str:
        return key_prefix(self.root, name, tag)

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

    async def server_time(self) -> float:
        return time.time()

    async def publish(self, channel: str, message: bytes) -> int:
        queues = self._channels.get(channel, set())
        for queue in queues:
            queue.put_nowait(message)
        return len(queues)

    @asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._channels.setdefault(channel, set()).add(queue)

        async def messages() -> AsyncIterator[bytes]:
            while True:
                yield await queue.get()

        try:
            yield messages()
        finally:
            self._channels[channel].discard(queue)

    async def ping(self) -> bool:
        return True

    async def aclose(self) -> None:
        self._values.clear()
        self._hashes.clear()
        self._expiry.clear()
