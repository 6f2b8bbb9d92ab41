"""Serving a wire format over the core: read and parse the body, prepare it, run it on
the core, and turn the ``Run`` into an HTTP response (one JSON body, or an event stream;
the answer read as every caller reads it, ``gateway.core.answer``).

Every generation endpoint is this one call, whatever its format::

    async def chat_completions(request: Request, call: TenantDep) -> Response:
        return await serve(request, call, CHAT)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.answer import answer, collect
from gateway.core.entrance import Options, ask_for
from gateway.core.serving import Run
from gateway.edge.http import TenantCall, read_body, until_disconnect
from gateway.telemetry.timing import lap
from gateway.wire.format import Body, Caller, Exchange, WireFormat
from gateway.wire.sse import EventStreamResponse, sse
from routers.session import SessionHint


async def serve(request: Request, call: TenantCall, wire: WireFormat[Body]) -> Response:
    """What every generation endpoint does; only the wire format differs. The route's
    dependency authenticated ``call.principal`` and took ``call.core``, the request's
    config snapshot and collaborators (tracing stage "auth")."""
    core = call.core
    server = core.config.server
    raw = await read_body(request, server.max_body_bytes, server.header_timeout_s)
    caller = Caller(call.principal, core.config, request.headers, core.parts.responses)
    exchange = await wire.prepare(wire.parse(raw), caller)
    lap("parse")
    run = await core.start(ask_for(call.principal, exchange.turn, core_headers(request.headers)))
    lap("route")
    exchange.turn.compat.record()
    return await respond(request, run, exchange)


def core_headers(headers: Mapping[str, str]) -> Options:
    """The one place the request headers the core honours are read, for every endpoint
    that hands the core a request (generation, ``/v1/route``, ``count_tokens``)."""
    session = headers.get("x-session-id")
    return Options(
        cache_control=headers.get("cache-control"),
        forced_tier=headers.get("x-tiergate-tier"),
        session=SessionHint("header", session) if session else None,
    )


async def respond(request: Request, run: Run, exchange: Exchange) -> Response:
    """The run as the format's response, with the hints it carried named."""
    hints = exchange.turn.compat.headers().items()
    if run.routed.ask.stream:
        return await stream_response(run, exchange, hints)
    try:
        text, final = await until_disconnect(request, collect(run))
    finally:
        await run.close()
    payload = orjson.dumps(await exchange.whole(run, text, final))
    return Response(payload, media_type="application/json", headers=_headers(run, hints))


async def stream_response(
    run: Run, exchange: Exchange, headers: Iterable[tuple[str, str]] = ()
) -> Response:
    """Open the run (admission, the first chunk) and answer with its event stream."""
    try:
        await run.open()
    except BaseException:
        await run.close()
        raise
    events = exchange.events(run, answer(run))
    return EventStreamResponse(
        # Settled before the error event or the last bytes: a client holding the whole
        # answer has been charged (or journaled), even if this process dies the next
        # moment. A client that left is settled by ``on_close``.
        sse(events, run.request_id, settle=run.close, framing=exchange.framing),
        _headers(run, headers),
        on_close=run.close,
        write_timeout_s=run.config.server.write_timeout_s,
    )


def _headers(run: Run, extra: Iterable[tuple[str, str]]) -> dict[str, str]:
    headers = run.headers()
    headers.update(extra)
    return headers
