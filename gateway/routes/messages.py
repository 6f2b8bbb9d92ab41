"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic Messages over
the serving core.

A Messages request runs exactly as a chat request does (``core.route`` and one ``Run``:
auth, rate limits, budget, both caches, ``auto``, ledger, metrics, traces); only the
translation (``gateway.wire.messages_input``) and the rendering
(``gateway.wire.messages_output``) are its own. The key comes as ``x-api-key`` or as a
Bearer token; ``anthropic-version`` is accepted, each ``anthropic-beta`` flag is a hint
named in ``x-tiergate-ignored`` (``anthropic-beta:FLAG``) with the body's own hints.
Errors on this family are in Anthropic's shape (``gateway.edge.error_boundary``).
"""

from __future__ import annotations

from functools import partial

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.respond import ask_for, respond
from gateway.core.timing import lap
from gateway.edge.deps import TenantDep
from gateway.edge.http import TracedRoute, read_body
from gateway.edge.openapi import MESSAGES_ERRORS, request_body
from gateway.money.spend import prompt_upper_tokens
from gateway.routing.route import Ask
from gateway.wire.common import parse_body
from gateway.wire.compat import Compat
from gateway.wire.format import WireFormat
from gateway.wire.messages import CountTokensRequest, MessagesRequest
from gateway.wire.messages_input import to_generation
from gateway.wire.messages_output import FRAMING, events, whole

router = APIRouter(route_class=TracedRoute, tags=["v1"], responses=MESSAGES_ERRORS)

MESSAGES = WireFormat(
    partial(parse_body, MessagesRequest),
    lambda body: to_generation(body).generation,
    whole,
    events,
    FRAMING,
)


def beta_hints(request: Request) -> Compat:
    """``anthropic-beta`` flags: none changes what a tier here does."""
    flags = request.headers.get("anthropic-beta", "")
    named = (f"anthropic-beta:{f.strip()}" for f in flags.split(",") if f.strip())
    return Compat(ignored=tuple(dict.fromkeys(named)))


@router.post("/v1/messages", name="messages", openapi_extra=request_body(MessagesRequest))
async def create_message(request: Request, call: TenantDep) -> Response:
    core, principal = call.core, call.principal
    server = core.config.server  # the request's snapshot
    raw = await read_body(request, server.max_body_bytes, server.header_timeout_s)
    body = MESSAGES.parse(raw)
    turn = to_generation(body, principal.policy.compat)
    compat = turn.compat.merged(beta_hints(request))
    lap("parse")
    ask = ask_for(
        request,
        principal,
        body.model,
        turn.generation,
        stream=body.stream,
        include_usage=True,
        metadata=body.annotations(),  # the ledger event and the trace keep user_id
    )
    routed = await core.route(ask)
    lap("route")
    compat.record()
    return await respond(request, core.run(routed), MESSAGES, compat.headers().items())


@router.post(
    "/v1/messages/count_tokens",
    name="messages_count_tokens",
    openapi_extra=request_body(CountTokensRequest),
)
async def count_tokens(request: Request, call: TenantDep) -> Response:
    """The prompt's tokens as the budget counts them before a request runs (an upper
    estimate on the tier the request would be routed to); nothing runs, nothing is
    charged, nothing is cached."""
    core, principal = call.core, call.principal
    config = core.config
    raw = await read_body(request, config.server.max_body_bytes, config.server.header_timeout_s)
    body = parse_body(CountTokensRequest, raw).as_request()
    turn = to_generation(body, principal.policy.compat)
    ask = Ask(
        principal,
        body.model,
        turn.generation,
        stream=False,
        include_usage=False,
        forced_tier=request.headers.get("x-tiergate-tier"),
    )
    routed = await core.route(ask, explain=True)  # no cache lookup; not traffic
    tokens = prompt_upper_tokens(config, turn.generation, routed.tier)
    headers = {"x-tiergate-tier": routed.tier, **turn.compat.merged(beta_hints(request)).headers()}
    return Response(
        orjson.dumps({"input_tokens": tokens}), media_type="application/json", headers=headers
    )
