"""Commands issued in one turn of the event loop go to Redis as one pipeline.

A request's store calls (the cache's lookups and writes, its session, its budget's
reservation and settlement) are single commands, and under load many requests issue
theirs in the same turn of the loop. Sent one by one through redis-py, each pays for its
own trip through the connection pool, the retry wrapper, its timeouts and its socket
write and read: most of the gateway's CPU per Redis call. ``CoalescingRedis`` queues a
command and sends everything queued in that turn as one non-transactional pipeline on
one connection, as ioredis's auto-pipelining does; each caller gets its own reply or its
own error, exactly as ``execute_command`` would have given it.

Only for one server (a cluster's pipelines split by node), and never for a blocking
command (``XREAD BLOCK``, ``BLPOP``): it would hold every command queued behind it. The
stores that block read on a client of their own (``RedisStore(coalesce=False)``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

Queued = tuple[tuple[Any, ...], dict[str, Any], asyncio.Future[Any]]


class CoalescingRedis(aioredis.Redis):
    """A ``redis.asyncio.Redis`` whose commands are pipelined by turn of the loop."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._queued: list[Queued] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        if not self._queued:  # the turn's first: the sender runs at the loop's next turn,
            task = loop.create_task(self._send())  # after every command this turn issues
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        self._queued.append((args, options, reply))
        return await reply

    async def _replies(self, queued: list[Queued]) -> list[Any]:
        """The replies in order, a command's error (``ResponseError``) in its place."""
        if len(queued) == 1:  # alone in its turn: sent as it would have been, no pipeline
            args, options, _ = queued[0]
            try:
                return [await super().execute_command(*args, **options)]  # type: ignore[no-untyped-call]
            except ResponseError as exc:
                return [exc]
        async with self.pipeline(transaction=False) as pipe:
            for args, options, _ in queued:
                pipe.execute_command(*args, **options)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
            return replies

    async def _send(self) -> None:
        queued, self._queued = self._queued, []
        await self._pipeline(queued)

    async def _pipeline(self, queued: list[Queued]) -> None:
        try:
            replies = await self._replies(queued)
        except BaseException as exc:  # the connection failed: every caller hears of it
            for _, _, reply in queued:
                if reply.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    reply.cancel()
                else:
                    reply.set_exception(_copy(exc))
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, reply), value in zip(queued, replies, strict=True):
            if reply.done():  # its caller was cancelled
                continue
            if isinstance(value, Exception):
                reply.set_exception(value)
            else:
                reply.set_result(value)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self._sending:
            await asyncio.wait(set(self._sending))
        await super().aclose(close_connection_pool)


def _copy(exc: BaseException) -> BaseException:
    """One failure per caller: a shared instance would gather every caller's traceback."""
    try:
        fresh = type(exc)(*exc.args)
    except Exception:  # an exception type whose constructor takes other arguments
        return exc
    fresh.__cause__ = exc
    return fresh
