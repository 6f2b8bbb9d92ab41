"""Request plumbing every endpoint shares: bounded body reads and API-key auth."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from gateway.errors import InvalidApiKey, InvalidRequest, PayloadTooLarge
from gateway.sse import wait_disconnect
from gateway.state import GatewayState
from gateway.tracing import AUTH, stage
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


def authenticate(request: Request, state: GatewayState) -> Principal:
    with stage(AUTH) as span:
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise InvalidApiKey(
                "You didn't provide an API key (header 'Authorization: Bearer KEY')."
            )
        principal = state.keyring.authenticate(key.strip())
        if principal is None:
            raise InvalidApiKey("Incorrect API key provided.")
        span.set_attribute("tiergate.tenant", principal.tenant)
    return principal


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work``, cancelling it if the client goes away first (non-streaming requests)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_disconnect(request.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
    return await task
