"""Serving a wire format over the core: read and parse the body, route it, run it, and
turn the ``Run`` into an HTTP response (one JSON body, or an event stream).

    async def chat_completions(request: Request, call: TenantDep) -> Response:
        return await serve(request, call, CHAT)

A format with steps of its own between parsing and routing (loading a stored
conversation, say) calls ``call.core.route`` itself and then ``respond``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import replace

import orjson
from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk, GenerationRequest, TokenLogprob
from gateway.core.serving import Run
from gateway.core.timing import lap
from gateway.edge.http import TenantCall, read_body, until_disconnect
from gateway.routing.route import Ask
from gateway.wire.format import Body, RunView, WireFormat
from gateway.wire.sse import Event, EventStreamResponse, Framing, sse
from policies.tenants import Principal


async def serve(request: Request, call: TenantCall, wire: WireFormat[Body]) -> Response:
    """What every generation endpoint does; only the wire format differs. The route's
    dependency authenticated ``call.principal`` and took ``call.core``, the request's
    config snapshot and collaborators (tracing stage "auth")."""
    core = call.core
    server = core.config.server
    raw = await read_body(request, server.max_body_bytes, server.header_timeout_s)
    body = wire.parse(raw)
    lap("parse")
    ask = ask_for(
        request,
        call.principal,
        body.model,
        wire.to_generation(body),
        stream=body.stream,
        include_usage=body.include_usage,
        metadata=body.annotations(),
    )
    compat = body.compat()
    routed = await core.route(ask)
    lap("route")
    compat.record()
    return await respond(request, core.run(routed), wire, compat.headers().items())


def ask_for(
    request: Request,
    principal: Principal,
    model: str,
    generation: GenerationRequest,
    *,
    stream: bool,
    include_usage: bool,
    metadata: Mapping[str, str] | None,
) -> Ask:
    """A generation request as every wire format hands it to the core: the client's
    ``Cache-Control`` and ``x-tiergate-tier`` headers are read here, once."""
    return Ask(
        principal,
        model,
        generation,
        stream=stream,
        include_usage=include_usage,
        cache_control=request.headers.get("cache-control"),
        forced_tier=request.headers.get("x-tiergate-tier"),
        metadata=metadata,
    )


async def respond(
    request: Request,
    run: Run,
    wire: WireFormat[Body],
    headers: Iterable[tuple[str, str]] = (),
) -> Response:
    """The run as the format's response; ``headers`` join the run's own."""
    if run.routed.stream:
        return await stream_response(run, wire.events, wire.framing, headers)
    try:
        text, final = await until_disconnect(request, collect(run))
    finally:
        await run.close()
    payload = orjson.dumps(wire.whole(run, text, final))
    return Response(payload, media_type="application/json", headers=_headers(run, headers))


async def stream_response(
    run: Run,
    events: Callable[[RunView, AsyncIterator[Chunk]], AsyncIterator[Event]],
    framing: Framing,
    headers: Iterable[tuple[str, str]] = (),
) -> Response:
    """Open the run (admission, the first chunk) and answer with its event stream."""
    try:
        await run.open()
    except BaseException:
        await run.close()
        raise
    return EventStreamResponse(
        # Settled before the error event or the last bytes: a client holding the whole
        # answer has been charged (or journaled), even if this process dies the next
        # moment. A client that left is settled by ``on_close``.
        sse(events(run, run.chunks()), run.request_id, settle=run.close, framing=framing),
        _headers(run, headers),
        on_close=run.close,
        write_timeout_s=run.config.server.write_timeout_s,
    )


def _headers(run: Run, extra: Iterable[tuple[str, str]]) -> dict[str, str]:
    headers = run.headers()
    headers.update(extra)
    return headers


async def collect(run: Run) -> tuple[str, Chunk]:
    """Open the run and drain it: its text, and its final chunk carrying every token's
    log-probabilities (each chunk carried its own)."""
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
    if logprobs:
        final = replace(final, logprobs=tuple(logprobs))
    return "".join(parts), final
