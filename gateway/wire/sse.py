"""The outer streaming layer: a wire format's events in, frames out, always ending with
the format's last bytes (its ``Framing``: ``data: [DONE]`` for OpenAI's, nothing for
named events).

An error after the first byte becomes one error event in the format's shape (an
unexpected one: a generic ``internal_error`` with the request id, the traceback only
in the log). A client disconnect cancels the stream at once, even while no token is
flowing (prefill, queue wait), so the engine request is aborted; nothing more is
written. So does a client that stops reading: a write that cannot go out within
``write_timeout_s`` ends the stream, and closing it frees the engine slot and the
budget hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import ApiError, internal_error

log = logging.getLogger(__name__)

Event = dict[str, Any]


def data_frame(event: Event) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def named_frame(event: Event) -> bytes:
    """``event: TYPE`` then the data line: the event's name is its ``type``."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def openai_error(error: ApiError) -> Sequence[Event]:
    return [error.body()]


@dataclass(frozen=True, slots=True)
class Framing:
    """How a format's events are written."""

    frame: Callable[[Event], bytes]
    done: bytes  # written last, after the events or the error events
    # What an error after the first byte becomes: one event (OpenAI's, Anthropic's), or
    # several (Responses: ``error`` then ``response.failed``).
    error: Callable[[ApiError], Sequence[Event]]


OPENAI_SSE = Framing(data_frame, b"data: [DONE]\n\n", openai_error)


def named_events(error: Callable[[ApiError], Sequence[Event]]) -> Framing:
    """Framing for formats whose events are named by their ``type`` and end without a
    sentinel; ``error`` gives the error events (their ``type`` names them too)."""
    return Framing(named_frame, b"", error)


async def sse(
    bodies: AsyncIterator[dict[str, Any]],
    request_id: str = "",
    settle: Callable[[], Awaitable[None]] | None = None,
    framing: Framing = OPENAI_SSE,
) -> AsyncGenerator[bytes, None]:
    """``settle`` runs once the bodies have ended (in any way but the client leaving),
    before the error event or the last bytes are written; what it raises is an error
    event."""
    frame = framing.frame
    try:
        try:
            async for body in bodies:
                yield frame(body)
        except Exception:  # re-raised below: it becomes the error event
            if settle is not None:
                await settle()
            raise
        if settle is not None:
            await settle()
    except ApiError as exc:
        log.warning("%s: stream failed after the first byte: %s", request_id, exc.detail or exc)
        for event in framing.error(exc):
            yield frame(event)
    except Exception:
        log.exception("%s: stream failed after the first byte", request_id)
        for event in framing.error(internal_error(request_id or "unknown")):
            yield frame(event)
    if framing.done:
        yield framing.done


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
        write_timeout_s: float | None = None,
    ) -> None:
        self.events = events
        self.on_close = on_close
        self.write_timeout_s = write_timeout_s
        self.writing = False  # inside a write: it blocks while the client's socket is full
        self.written = 0
        self.status_code = 200
        self.background = None
        self.init_headers({**headers, "cache-control": "no-cache", "x-accel-buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.ensure_future(self._write(send))
        watcher = asyncio.ensure_future(wait_disconnect(receive))
        stall = self._watch_stalls(writer)
        try:
            await asyncio.wait({writer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stall is not None:
                stall.cancel()
            writer.cancel()
            watcher.cancel()
            await asyncio.wait({writer, watcher})
            await self.events.aclose()
            if self.on_close is not None:
                # Runs even when the stream was never read (the client left at once).
                await self.on_close()
        if not writer.cancelled():
            writer.result()

    def _watch_stalls(self, writer: asyncio.Future[None]) -> _StallWatch | None:
        if self.write_timeout_s is None:
            return None
        return _StallWatch(self, writer, self.write_timeout_s)

    async def _write(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        try:
            async for data in self.events:
                self.writing = True
                await send({"type": "http.response.body", "body": data, "more_body": True})
                self.writing = False
                self.written += 1
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            log.info("client went away mid-stream")


class _StallWatch:
    """Cancels the writer once one write has waited ``timeout`` (checked every ``timeout``,
    so a reader that stopped is cut after one to two periods). One timer per stream, not
    one per chunk: each write only flips a flag and bumps a counter."""

    def __init__(self, stream: EventStreamResponse, writer: asyncio.Future[None], timeout: float):
        self.stream, self.writer, self.timeout = stream, writer, timeout
        self.seen = -1
        self.handle = asyncio.get_running_loop().call_later(timeout, self.check)

    def check(self) -> None:
        if self.stream.writing and self.stream.written == self.seen:
            log.warning("client stopped reading for %ss: stream closed", self.timeout)
            self.writer.cancel()
            return
        self.seen = self.stream.written
        self.handle = asyncio.get_running_loop().call_later(self.timeout, self.check)

    def cancel(self) -> None:
        self.handle.cancel()
