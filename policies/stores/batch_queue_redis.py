"""The batch line queue on Redis: one stream, one consumer group (``runners``).

Every replica reads new entries (``XREADGROUP``), beats for the ones it holds (``XCLAIM
… JUSTID`` resets their idle time) and claims a silent consumer's (``XAUTOCLAIM`` past the
idle time); an entry is acknowledged and deleted together, so the stream holds what is
queued or held, nothing else. Keys: ``P:{batches}:lines`` and its ``:generation``
(docs/redis-keys.md).

A Redis that lost the stream (restarted empty, or from a snapshot older than the group)
answers ``NOGROUP``: the group is made again, in one script with a new generation (the
time in ms), and the command tried once more. The generation says which entries the
queue may have lost: a batch records the one it queued its lines under, and the sweep
queues again the unfinished lines of a batch queued under another
(``gateway.batches.runner.tend``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from policies.stores.batch_queue import QueuedLine
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore

log = logging.getLogger(__name__)

GROUP = "runners"
CHUNK = 500  # entries per pipeline
# The group, made if missing, and the queue's generation: a new one when this call made
# the group (whatever the stream held before is gone), 1 for a group made before
# generations were kept (it has been there since).
MAKE_GROUP = """
local made = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if type(made) == 'table' and made.err then
  if not string.find(made.err, 'BUSYGROUP', 1, true) then return made end
  local generation = redis.call('GET', KEYS[2])
  if generation then return tonumber(generation) end
  redis.call('SET', KEYS[2], 1)
  return 1
end
redis.call('SET', KEYS[2], ARGV[2])
return tonumber(ARGV[2])
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLineQueue:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.queue_key = f"{store.keys('batches')}:lines"
        self.generation_key = f"{self.queue_key}:generation"
        self._make_group = store.script(MAKE_GROUP)
        self._group_ready = False

    async def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``store.call``; on ``NOGROUP`` (the store lost the stream) the group is made
        again and the command tried once more."""
        try:
            return await self.store.call(what, fn, *args, **kwargs)
        except StoreUnavailable as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("batch queue: the store lost its consumer group; making it again")
            self._group_ready = False
            await self._group()
            return await self.store.call(what, fn, *args, **kwargs)

    async def _group(self) -> int:
        """The consumer group, made on first use (or again after ``NOGROUP``); the
        queue's generation."""
        generation = await self._make_group(
            "batch group",
            [self.queue_key, self.generation_key],
            [GROUP, int(time.time() * 1000)],
        )
        self._group_ready = True
        return int(generation)

    async def generation(self) -> int:
        """The queue's current generation (the group made if it is missing)."""
        return await self._group()

    async def enqueue(self, tenant: str, batch_id: str, indices: Sequence[int]) -> int:
        generation = await self._group()
        client = self.store.client

        async def add(part: Sequence[int]) -> None:
            async with client.pipeline(transaction=False) as pipe:
                for index in part:
                    pipe.xadd(self.queue_key, {"t": tenant, "b": batch_id, "n": index})
                await pipe.execute()

        for start in range(0, len(indices), CHUNK):
            await self._call("batch enqueue", add, indices[start : start + CHUNK])
        return generation

    async def _ready(self) -> None:
        if not self._group_ready:
            await self._group()

    def _lines(self, entries: Sequence[Any]) -> list[QueuedLine]:
        lines = []
        for entry, raw in entries:
            if raw is None:  # deleted under us
                continue
            fields = {_text(k): _text(v) for k, v in raw.items()}
            lines.append(QueuedLine(_text(entry), fields["t"], fields["b"], int(fields["n"])))
        return lines

    async def read(self, consumer: str, count: int) -> list[QueuedLine]:
        await self._ready()
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
        await self._ready()
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
        await self._call(
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
        await self._ready()
        client = self.store.client

        async def count() -> Any:
            async with client.pipeline(transaction=False) as pipe:
                pipe.xlen(self.queue_key)
                pipe.xpending(self.queue_key, GROUP)
                return await pipe.execute()

        length, pending = await self._call("batch queued", count)
        return max(int(length) - int(pending["pending"]), 0)
