"""The outer streaming layer: wire bodies in, ``data:`` lines out, always ending in [DONE].

An error after the first byte becomes one error event. A client disconnect cancels
the stream at once, even while no token is flowing (prefill, queue wait), so the
engine request is aborted; nothing more is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import ApiError

log = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"


def event(body: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def sse(bodies: AsyncIterator[dict[str, Any]]) -> AsyncGenerator[bytes, None]:
    try:
        async for body in bodies:
            yield event(body)
    except ApiError as exc:
        log.warning("stream failed after the first byte: %s", exc.message)
        yield event(exc.body())
    yield DONE


async def wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        continue


class EventStreamResponse(Response):
    """SSE over ASGI that watches for the client leaving and always closes its source."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncGenerator[bytes, None],
        headers: Mapping[str, str],
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.events = events
        self.on_close = on_close
        self.status_code = 200
        self.background = None
        self.init_headers({**headers, "cache-control": "no-cache", "x-accel-buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.ensure_future(self._write(send))
        watcher = asyncio.ensure_future(wait_disconnect(receive))
        try:
            await asyncio.wait({writer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            writer.cancel()
            watcher.cancel()
            await asyncio.wait({writer, watcher})
            await self.events.aclose()
            if self.on_close is not None:
                # Runs even when the stream was never read (the client left at once).
                await self.on_close()
        if not writer.cancelled():
            writer.result()

    async def _write(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        try:
            async for data in self.events:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            log.info("client went away mid-stream")
