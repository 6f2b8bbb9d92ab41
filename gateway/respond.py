"""The generation endpoints' shared path: authenticate, parse, route, run, and turn the
``Execution`` into an HTTP response (one JSON body, or an SSE stream)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk, GenerationRequest, TokenLogprob
from gateway.http import read_body, until_disconnect
from gateway.routing import route
from gateway.serving import Execution
from gateway.sse import CHAT_FRAMING, EventStreamResponse, Framing, sse
from gateway.state import GatewayState
from gateway.timing import lap
from gateway.wire.common import SamplingFields, parse_body
from policies.tenants import Principal

BodyBuilder = Callable[[Execution, str, Chunk], dict[str, Any]]
StreamBuilder = Callable[[Execution], AsyncIterator[dict[str, Any]]]
Body = TypeVar("Body", bound=SamplingFields)


async def generate(
    request: Request,
    state: GatewayState,
    principal: Principal,
    wire_model: type[Body],
    to_generation: Callable[[Body], GenerationRequest],
    whole: BodyBuilder,
    streamed: StreamBuilder,
) -> Response:
    """What every generation endpoint does; only the wire shapes differ. The route's
    dependency resolved ``state`` and authenticated ``principal`` (tracing stage "auth")."""
    # The request's config snapshot, taken right after the key was looked up in the route's
    # dependency (a YAML key resolves without suspending, so a policy reload lands wholly
    # before or wholly after the pair): nothing later reads state.config.
    config = state.config
    raw = await read_body(request, config.server.max_body_bytes, config.server.header_timeout_s)
    body = parse_body(wire_model, raw)
    lap("parse")
    routed = await route(
        state,
        principal,
        body.model,
        to_generation(body),
        stream=body.stream,
        include_usage=body.include_usage,
        cache_control=request.headers.get("cache-control"),
        forced_tier=request.headers.get("x-tiergate-tier"),
        config=config,
        exact_first=True,
    )
    lap("route")
    return await respond(request, Execution(state, routed), whole, streamed)


async def respond(
    request: Request, run: Execution, whole: BodyBuilder, streamed: StreamBuilder
) -> Response:
    if run.routed.stream:
        return await stream_response(run, streamed)
    try:
        payload = await until_disconnect(request, _collect(run, whole))
    finally:
        await run.close()
    return Response(payload, media_type="application/json", headers=run.headers())


async def stream_response(
    run: Execution, streamed: StreamBuilder, framing: Framing = CHAT_FRAMING
) -> Response:
    """Open the run (admission, the first chunk) and answer with its SSE stream."""
    try:
        await run.open()
    except BaseException:
        await run.close()
        raise
    return EventStreamResponse(
        # Settled before the error event or the stream's end: a client holding the whole
        # answer has been charged (or journaled), even if this process dies the next
        # moment. A client that left is settled by ``on_close``.
        sse(streamed(run), run.routed.request_id, settle=run.close, framing=framing),
        run.headers(),
        on_close=run.close,
        write_timeout_s=run.routed.config.server.write_timeout_s,
    )


async def _collect(run: Execution, whole: BodyBuilder) -> bytes:
    return orjson.dumps(whole(run, *await collect(run)))


async def collect(run: Execution) -> tuple[str, Chunk]:
    """Open the run and read it whole: its text and its final chunk (every token's
    logprobs on it)."""
    await run.open()
    parts: list[str] = []
    logprobs: list[TokenLogprob] = []
    final: Chunk | None = None
    async for chunk in run.chunks():
        parts.append(chunk.text)
        logprobs.extend(chunk.logprobs or ())
        if chunk.finish_reason is not None:
            final = chunk
    assert final is not None, "an engine stream ends with a final chunk"
    if logprobs:  # the body carries every token's entry; chunks carried their own
        final = replace(final, logprobs=tuple(logprobs))
    return "".join(parts), final
