"""Request plumbing every endpoint shares: bounded body reads and API-key auth."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from gateway.errors import InvalidApiKey, InvalidRequest, PayloadTooLarge, ServiceUnavailable
from gateway.sse import wait_disconnect
from gateway.state import GatewayState
from gateway.tracing import AUTH, stage
from policies.store import StoreUnavailable
from policies.tenants import Principal

T = TypeVar("T")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it (or its declared length) passes ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_big = int(declared) > limit
        except ValueError:
            raise InvalidRequest("invalid Content-Length header") from None
        if too_big:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
        parts.append(part)
    return b"".join(parts)


async def authenticate(request: Request, state: GatewayState) -> Principal:
    with stage(AUTH) as span:
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise InvalidApiKey(
                "You didn't provide an API key (header 'Authorization: Bearer KEY')."
            )
        try:
            principal = await state.keys.authenticate(key.strip())
        except StoreUnavailable:
            raise ServiceUnavailable("the key store is unreachable") from None
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
