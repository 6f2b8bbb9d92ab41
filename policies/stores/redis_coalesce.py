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

The turn's commands are packed by hiredis as they are issued (an argument Redis cannot
take fails its own caller at once), written in one send, and their replies read under one
timeout, the client's ``socket_timeout``, where a redis-py pipeline packs in Python and
times every reply on its own (``bench/perf/redis_client.py`` measures the client's CPU
per command both ways). A connection failure is retried as redis-py retries a pipeline
(the connection's ``retry``), and every reply goes through the client's
``response_callbacks``, so a caller sees what ``execute_command`` would have returned.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

# A command's name (for its reply's callback), its options, its packed bytes, its caller.
Queued = tuple[str, dict[str, Any], bytes, asyncio.Future[Any]]


class CoalescingRedis(aioredis.Redis):
    """A ``redis.asyncio.Redis`` whose commands are pipelined by turn of the loop."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._queued: list[Queued] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = args[0]
        packed = _pack(args)
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        if not self._queued:  # the turn's first: the sender runs at the loop's next turn,
            task = loop.create_task(self._send())  # after every command this turn issues
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        self._queued.append((name, options, packed, reply))
        return await reply

    async def _replies(self, queued: list[Queued]) -> list[Any]:
        """The replies in order, a command's error (``ResponseError``) in its place."""
        pool = self.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            return await conn.retry.call_with_retry(  # type: ignore[no-any-return]
                lambda: self._exchange(conn, queued),
                lambda _error: conn.disconnect(),
            )
        finally:
            await pool.release(conn)

    async def _exchange(self, conn: AbstractConnection, queued: list[Queued]) -> list[Any]:
        await conn.send_packed_command(b"".join(packed for _, _, packed, _ in queued))
        replies: list[Any] = []
        try:
            async with asyncio.timeout(conn.socket_timeout):
                for name, options, _, _ in queued:
                    try:  # math.inf: no timeout of its own, the turn's one above
                        raw = await conn.read_response(timeout=math.inf)
                    except ResponseError as exc:
                        replies.append(options.get(EMPTY_RESPONSE, exc))
                        continue
                    replies.append(await self._parsed(name, options, raw))
        except TimeoutError:
            await conn.disconnect(nowait=True)  # replies may still arrive: never reuse it
            raise RedisTimeout(f"Timeout reading {len(queued)} replies from redis") from None
        return replies

    async def _parsed(self, name: str, options: dict[str, Any], raw: Any) -> Any:
        callback = self.response_callbacks.get(name)
        if callback is None:
            return raw
        kept = {k: v for k, v in options.items() if k not in (EMPTY_RESPONSE, NEVER_DECODE, "keys")}
        parsed = callback(raw, **kept)
        return await parsed if asyncio.iscoroutine(parsed) else parsed

    async def _send(self) -> None:
        queued, self._queued = self._queued, []
        await self._pipeline(queued)

    async def _pipeline(self, queued: list[Queued]) -> None:
        try:
            replies = await self._replies(queued)
        except BaseException as exc:  # the connection failed: every caller hears of it
            for _, _, _, reply in queued:
                if reply.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    reply.cancel()
                else:
                    reply.set_exception(_copy(exc))
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, _, reply), value in zip(queued, replies, strict=True):
            if reply.done():  # its caller was cancelled
                continue
            if isinstance(value, ResponseError):
                reply.set_exception(value)
            else:
                reply.set_result(value)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self._sending:
            await asyncio.wait(set(self._sending))
        await super().aclose(close_connection_pool)


def _pack(args: tuple[Any, ...]) -> bytes:
    """One command in Redis's protocol; a name of several words (``SCRIPT LOAD``) is sent
    as separate words, as redis-py sends it."""
    name = args[0]
    if isinstance(name, str) and " " in name:
        args = (*name.split(), *args[1:])
    try:
        return hiredis.pack_command(args)  # type: ignore[no-any-return]
    except TypeError as exc:  # None, a bool, a dict: what redis-py's encoder refuses
        kinds = ", ".join(sorted({type(a).__name__ for a in args}))
        raise DataError(f"cannot send {name!r} with arguments of types {kinds}: {exc}") from None


def _copy(exc: BaseException) -> BaseException:
    """One failure per caller: a shared instance would gather every caller's traceback."""
    try:
        fresh = type(exc)(*exc.args)
    except Exception:  # an exception type whose constructor takes other arguments
        return exc
    fresh.__cause__ = exc
    return fresh
