"""Request plumbing every endpoint shares: bounded body reads and tenant-key auth."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import InvalidApiKey, InvalidRequest, PayloadTooLarge, RequestTimeout
from gateway.sse import wait_disconnect
from gateway.state import GatewayState
from gateway.timing import begin_request
from gateway.tracing import AUTH, stage, traced
from policies.tenants import Principal

T = TypeVar("T")
Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class TracedRoute(APIRoute):
    """A generation route: its root span and stage timer start before the dependencies
    (auth included) run; the route's ``name`` is the span's operation."""

    def get_route_handler(self) -> Handler:
        handler = traced(self.name, super().get_route_handler())

        async def timed(request: Request) -> Response:
            state: GatewayState = request.app.state.tiergate
            begin_request(state.config.server.timing_header)
            return await handler(request)

        return timed


async def read_body(request: Request, limit: int, timeout_s: float | None = None) -> bytes:
    """The body, refused with 413 as soon as it (or its declared length) passes ``limit``,
    and with 408 when it has not all arrived within ``timeout_s`` (a slow sender)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_big = int(declared) > limit
        except ValueError:
            raise InvalidRequest("invalid Content-Length header") from None
        if too_big:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
    try:
        async with asyncio.timeout(timeout_s):
            return await _bounded_body(request, limit)
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {timeout_s}s") from None


async def _bounded_body(request: Request, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
        parts.append(part)
    return b"".join(parts)


def authenticate(state: GatewayState, key: str | None) -> Principal:
    """The tenant behind a Bearer key (the one place tenant keys are checked)."""
    with stage(AUTH) as span:
        key = (key or "").strip()
        if not key:
            raise InvalidApiKey(
                "You didn't provide an API key (header 'Authorization: Bearer KEY')."
            )
        principal = state.keyring.authenticate(key)
        if principal is None:
            raise InvalidApiKey("Incorrect API key provided.")
        span.set_attribute("tiergate.tenant", principal.tenant)
    return principal


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work``, cancelling it if the client goes away first (non-streaming requests).

    ``work`` runs in this task; only the watcher is a task of its own (one task and no
    ``asyncio.wait`` per request: this is on every request's path).
    """
    task = asyncio.current_task()
    assert task is not None
    watcher = asyncio.ensure_future(wait_disconnect(request.receive))
    finished = False

    def client_gone(done: asyncio.Future[None]) -> None:
        if not finished and not done.cancelled() and done.exception() is None:
            task.cancel()

    watcher.add_done_callback(client_gone)
    try:
        return await work
    finally:
        finished = True
        watcher.cancel()
