"""Where replicas pool the score sketch behind ``routing.target_share``.

Counts are kept per policy in time buckets (``bucket`` = Redis ``TIME`` // bucket
length), so "recent traffic" is the last few buckets and an old bucket simply expires.
A bucket holds score-bin counts (field ``"b<bin>"``) and the tiers the scores mapped to
(``"t<tier>"``). Each replica adds its counts every sync and reads the sum back: the
quantiles, and so the thresholds, are the same on every replica.

On Redis a bucket is one hash, ``{P}:{share}:<policy>:<bucket>``; the ``{share}`` hash
tag keeps every bucket in one cluster slot, so a sync is one pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from policies.stores.store_redis import RedisStore


class ShareStore(Protocol):
    async def now(self) -> float:
        """The clock every replica buckets by (Redis ``TIME``)."""
        ...

    async def add(
        self, policy: str, bucket: int, counts: Mapping[str, int], ttl_s: float
    ) -> None: ...

    async def read(self, policy: str, buckets: Sequence[int]) -> dict[str, int]:
        """The counts of ``buckets`` summed field by field."""
        ...


class MemoryShareStore:
    """One process; buckets are never read past their window, and dropped with it."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, int], tuple[float, dict[str, int]]] = {}

    async def now(self) -> float:
        return time.time()

    async def add(self, policy: str, bucket: int, counts: Mapping[str, int], ttl_s: float) -> None:
        now = time.monotonic()
        self._buckets = {k: v for k, v in self._buckets.items() if v[0] > now}
        _, held = self._buckets.get((policy, bucket), (0.0, {}))
        for field, n in counts.items():
            held[field] = held.get(field, 0) + n
        self._buckets[(policy, bucket)] = (now + ttl_s, held)

    async def read(self, policy: str, buckets: Sequence[int]) -> dict[str, int]:
        total: dict[str, int] = {}
        now = time.monotonic()
        for bucket in buckets:
            expires, held = self._buckets.get((policy, bucket), (0.0, {}))
            if expires > now:
                for field, n in held.items():
                    total[field] = total.get(field, 0) + n
        return total


class RedisShareStore:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.prefix = store.keys("share")

    def _key(self, policy: str, bucket: int) -> str:
        return f"{self.prefix}:{policy}:{bucket}"

    async def now(self) -> float:
        return await self.store.server_time()

    async def add(self, policy: str, bucket: int, counts: Mapping[str, int], ttl_s: float) -> None:
        if not counts:
            return
        key = self._key(policy, bucket)

        async def write() -> None:
            async with self.store.client.pipeline(transaction=False) as pipe:
                for field, n in counts.items():
                    pipe.hincrby(key, field, n)
                pipe.pexpire(key, max(int(ttl_s * 1000), 1))
                await pipe.execute()

        await self.store.call("share add", write)

    async def read(self, policy: str, buckets: Sequence[int]) -> dict[str, int]:
        async def fetch() -> list[dict[bytes, bytes]]:
            async with self.store.client.pipeline(transaction=False) as pipe:
                for bucket in buckets:
                    pipe.hgetall(self._key(policy, bucket))
                found: list[dict[bytes, bytes]] = await pipe.execute()
                return found

        total: dict[str, int] = {}
        for held in await self.store.call("share read", fetch):
            for field, n in held.items():
                name = field.decode()
                total[name] = total.get(name, 0) + int(n)
        return total
