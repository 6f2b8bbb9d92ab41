"""uvicorn's HTTP protocol (httptools when installed, else h11) as tiergate serves it.

Two things are added, by subclassing the class uvicorn lets a server configure:

- a request-header deadline: uvicorn has no timeout for a request that is still
  arriving, so a connection whose request headers are not complete ``timeout_s`` after
  it opened (or after its previous response) is closed (slowloris);
- JSON error pages. What the parser rejects (a bad request line or header, both
  Content-Length and Transfer-Encoding, two lengths that disagree, broken chunked
  framing) uvicorn answers with a text/plain "Invalid HTTP request received."; here it
  is a 400 in OpenAI's shape (``invalid_request_error``, code ``invalid_http_request``,
  the parser's reason in the message), and the connection closes, as uvicorn closes it.
  A request past ``limit_concurrency`` gets ``Overloaded``'s JSON 503 instead of
  uvicorn's text/plain one.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sys
from collections.abc import Sized
from typing import Any

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from gateway.errors import ApiError, InvalidRequest, Overloaded

MAX_REASON = 200  # characters of the parser's reason that reach the client
BAD_REQUEST_CODE = "invalid_http_request"
log = logging.getLogger("uvicorn.error")  # where uvicorn logs the limit it checks itself


def base_protocol() -> type[asyncio.Protocol]:
    """The protocol uvicorn's ``http="auto"`` would pick."""
    if importlib.util.find_spec("httptools") is not None:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    return H11Protocol


def bad_request_page(reason: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole HTTP/1.1 answer to a request the parser could not read."""
    text = reason.encode("ascii", "replace").decode()[:MAX_REASON].strip() or "malformed"
    error = InvalidRequest(f"Invalid HTTP request: {text}", code=BAD_REQUEST_CODE)
    body = orjson.dumps(error.body())
    lines = [b"HTTP/1.1 400 Bad Request"]
    lines += [name + b": " + value for name, value in default_headers]
    lines += [
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def _answer(send: Any, error: ApiError, *extra: tuple[bytes, bytes]) -> None:
    """``error`` as the whole response, and the connection closed after it."""
    body = orjson.dumps(error.body())
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _both_lengths(headers: list[tuple[bytes, bytes]]) -> bool:
    """Content-Length and Transfer-Encoding together: httptools refuses it; h11 reads the
    body by Transfer-Encoding (RFC 9112 allows both), which a proxy in front may not."""
    names = {name for name, _ in headers}
    return b"content-length" in names and b"transfer-encoding" in names


class Admission:
    """The app behind uvicorn's concurrency limit, answering past it (and a request with
    both lengths) in JSON. It holds the server's shared sets of connections and tasks, not
    the connection: a connection whose ``app`` held the connection (a bound method) would
    be a reference cycle, garbage only the collector frees, one per connection."""

    __slots__ = ("app", "connections", "limit", "tasks")

    def __init__(self, app: Any, limit: int | None, connections: Sized, tasks: Sized) -> None:
        self.app, self.limit, self.connections, self.tasks = app, limit, connections, tasks

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        limit = self.limit
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) - 1 >= limit):
            log.warning("Exceeded concurrency limit.")
            busy = Overloaded("the gateway has too many open connections; retry shortly")
            await _answer(send, busy, (b"retry-after", b"1"))
        elif _both_lengths(scope["headers"]):
            reason = "Transfer-Encoding can't be present with Content-Length"
            await _answer(
                send, InvalidRequest(f"Invalid HTTP request: {reason}", code=BAD_REQUEST_CODE)
            )
        else:
            await self.app(scope, receive, send)


def gateway_protocol(
    timeout_s: float, base: type[asyncio.Protocol] | None = None
) -> type[asyncio.Protocol]:
    """``base`` (uvicorn's pick by default) with the header deadline and JSON errors."""
    parent: Any = base or base_protocol()

    class GatewayProtocol(parent):  # type: ignore[misc]
        """One timer per connection, not one per response: a response that completes
        only moves the deadline, and the timer, when it fires early, waits out the rest."""

        _deadline: asyncio.TimerHandle | None = None
        _due = 0.0  # loop time by which the next request's headers must be in
        limit_concurrency: int | None  # uvicorn's, set in its __init__
        app: Any

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # The limit is checked in ``Admission``, once the request's task exists
            # (uvicorn checks it just before), so the answer past it can be JSON.
            self.app = Admission(self.app, self.limit_concurrency, self.connections, self.tasks)
            self.limit_concurrency = None

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to a parse error, called from the ``except`` that caught
            the parser's exception: that exception is the reason the client reads."""
            caught = sys.exc_info()[1]
            cycle = self.cycle
            if cycle is not None and cycle.response_started and not cycle.response_complete:
                self.transport.close()  # an answer is already on the wire: not a second
                return
            reason = str(caught) if caught is not None and str(caught) else msg
            self.transport.write(bad_request_page(reason, self.server_state.default_headers))
            self.transport.close()

        def _arm(self) -> None:
            self._due = self.loop.time() + timeout_s
            if self._deadline is None:
                self._deadline = self.loop.call_at(self._due, self._expire)

        def _expire(self) -> None:
            if self.loop.time() < self._due:  # a response completed since: wait out the rest
                self._deadline = self.loop.call_at(self._due, self._expire)
                return
            self._deadline = None
            waiting = self.cycle is None or self.cycle.response_complete
            if waiting and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

    return GatewayProtocol
