"""The batch line queue on Redis: one stream, one consumer group (``runners``).

Every replica reads new entries (``XREADGROUP``), beats for the ones it holds (``XCLAIM
… JUSTID`` resets their idle time) and claims a silent consumer's (``XAUTOCLAIM`` past the
idle time); an entry is acknowledged and deleted together, so the stream holds what is
queued or held, nothing else. Key: ``P:{batches}:lines`` (docs/redis-keys.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.stores.batch_queue import QueuedLine
from policies.stores.store_redis import RedisStore

GROUP = "runners"
CHUNK = 500  # entries per pipeline


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLineQueue:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.queue_key = f"{store.keys('batches')}:lines"
        self._group_ready = False

    async def _call(self, what: str, fn: Any, *args: Any) -> Any:
        return await self.store.call(what, fn, *args)

    async def _group(self) -> None:
        """The consumer group, made on first use (``BUSYGROUP``: another replica did)."""
        if self._group_ready:
            return
        from redis.exceptions import ResponseError

        async with self.store.errors("batch group"):
            try:
                await self.store.client.xgroup_create(self.queue_key, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._group_ready = True

    async def enqueue(self, tenant: str, batch_id: str, indices: Sequence[int]) -> None:
        await self._group()
        client = self.store.client

        async def add(part: Sequence[int]) -> None:
            async with client.pipeline(transaction=False) as pipe:
                for index in part:
                    pipe.xadd(self.queue_key, {"t": tenant, "b": batch_id, "n": index})
                await pipe.execute()

        for start in range(0, len(indices), CHUNK):
            await self._call("batch enqueue", add, indices[start : start + CHUNK])

    def _lines(self, entries: Sequence[Any]) -> list[QueuedLine]:
        lines = []
        for entry, raw in entries:
            if raw is None:  # deleted under us
                continue
            fields = {_text(k): _text(v) for k, v in raw.items()}
            lines.append(QueuedLine(_text(entry), fields["t"], fields["b"], int(fields["n"])))
        return lines

    async def read(self, consumer: str, count: int) -> list[QueuedLine]:
        await self._group()
        reply = await self._call(
            "batch read",
            self.store.client.xreadgroup,
            GROUP,
            consumer,
            {self.queue_key: ">"},
            count,
        )
        return self._lines(reply[0][1]) if reply else []

    async def claim(self, consumer: str, idle_s: float, count: int) -> list[QueuedLine]:
        await self._group()
        reply = await self._call(
            "batch claim",
            self.store.client.xautoclaim,
            self.queue_key,
            GROUP,
            consumer,
            int(idle_s * 1000),
            "0-0",
            count,
        )
        gone = [_text(e) for e in reply[2]] if len(reply) > 2 else []
        if gone:  # entries deleted while pending: nothing to run
            await self.ack(gone)
        return self._lines(reply[1])

    async def touch(self, consumer: str, entries: Sequence[str]) -> None:
        if not entries:
            return
        client = self.store.client
        await self.store.call(
            "batch touch",
            client.xclaim,
            self.queue_key,
            GROUP,
            consumer,
            0,
            list(entries),
            justid=True,
        )

    async def ack(self, entries: Sequence[str]) -> None:
        if not entries:
            return
        client = self.store.client

        async def done() -> None:
            async with client.pipeline(transaction=False) as pipe:
                pipe.xack(self.queue_key, GROUP, *entries)
                pipe.xdel(self.queue_key, *entries)
                await pipe.execute()

        await self._call("batch ack", done)

    async def queued(self) -> int:
        """Entries are deleted when acknowledged: the stream holds the undelivered ones
        and the pending ones."""
        await self._group()
        client = self.store.client

        async def count() -> Any:
            async with client.pipeline(transaction=False) as pipe:
                pipe.xlen(self.queue_key)
                pipe.xpending(self.queue_key, GROUP)
                return await pipe.execute()

        length, pending = await self._call("batch queued", count)
        return max(int(length) - int(pending["pending"]), 0)
