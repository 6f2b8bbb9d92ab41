"""The uvicorn server a gateway runs on, hardened from ``server:`` in the config.

- ``limit_concurrency``: past that many open connections or running requests, new
  requests get 503 instead of piling up.
- ``keep_alive_s``: an idle keep-alive connection is closed after that long.
- ``header_timeout_s``: uvicorn has no timeout for a request that is still arriving, so
  a connection whose request headers are not complete that long after it opened (or
  after its previous response) is closed; hundreds of half-sent requests (slowloris)
  then cost a few kB each for a few seconds and never hold a request slot. The body
  has the same limit once the headers are in (``gateway.edge.http.read_body``).
- ``write_timeout_s`` (streams that the client stopped reading) lives in ``gateway.wire.sse``.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from policies.schema import GatewayConfig


def _base_protocol() -> type[asyncio.Protocol]:
    if importlib.util.find_spec("httptools") is not None:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    return H11Protocol


def header_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed) with a request-header deadline."""
    base: Any = _base_protocol()

    class HeaderDeadline(base):  # type: ignore[misc]
        """One timer per connection, not one per response: a response that completes
        only moves the deadline, and the timer, when it fires early, waits out the rest."""

        _deadline: asyncio.TimerHandle | None = None
        _due = 0.0  # loop time by which the next request's headers must be in

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

    return HeaderDeadline


def server_config(app: Any, config: GatewayConfig, **overrides: Any) -> uvicorn.Config:
    """The uvicorn config for ``app``: host and port from ``config`` unless overridden."""
    server = config.server
    options: dict[str, Any] = {
        "host": server.host,
        "port": server.port,
        "http": header_timeout_protocol(server.header_timeout_s),
        "limit_concurrency": server.limit_concurrency,
        "timeout_keep_alive": server.keep_alive_s,
        "timeout_graceful_shutdown": 10,
        "lifespan": "on",
        **overrides,
    }
    return uvicorn.Config(app, **options)
