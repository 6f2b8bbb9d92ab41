"""Turn an ``Execution`` into an HTTP response: one JSON body, or an SSE stream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk
from gateway.http import until_disconnect
from gateway.serving import Execution
from gateway.sse import EventStreamResponse, sse

BodyBuilder = Callable[[Execution, str, Chunk], dict[str, Any]]
StreamBuilder = Callable[[Execution], AsyncIterator[dict[str, Any]]]


async def respond(
    request: Request, run: Execution, whole: BodyBuilder, streamed: StreamBuilder
) -> Response:
    if run.routed.stream:
        try:
            await run.open()
        except BaseException:
            await run.close()
            raise
        return EventStreamResponse(sse(streamed(run)), run.headers(), on_close=run.close)
    try:
        payload = await until_disconnect(request, _collect(run, whole))
    finally:
        await run.close()
    headers = run.headers()
    headers["x-tiergate-cost-usd"] = f"{run.outcome.cost_usd:.8f}"
    return Response(payload, media_type="application/json", headers=headers)


async def _collect(run: Execution, whole: BodyBuilder) -> bytes:
    await run.open()
    parts: list[str] = []
    final: Chunk | None = None
    async for chunk in run.chunks():
        parts.append(chunk.text)
        if chunk.finish_reason is not None:
            final = chunk
    assert final is not None, "an engine stream ends with a final chunk"
    return orjson.dumps(whole(run, "".join(parts), final))
