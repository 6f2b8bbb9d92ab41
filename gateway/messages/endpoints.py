"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic Messages over
the serving core.

A Messages request runs exactly as a chat request does (one ``serve`` call: auth, rate
limits, budget, both caches, ``auto``, ledger, metrics, traces); only its format
(``gateway.messages.render.MESSAGES``: the translation in ``gateway.messages.translate``,
the rendering, Anthropic's error shape) is its own. The key comes as ``x-api-key`` or as
a Bearer token; ``anthropic-version`` is accepted, each ``anthropic-beta`` flag is a hint
named in ``x-tiergate-ignored`` (``anthropic-beta:FLAG``) with the body's own hints.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.entrance import ask_for, tier_only
from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import TracedEndpoint, read_body
from gateway.edge.openapi import MESSAGES_ERRORS, request_body
from gateway.edge.respond import core_headers, serve
from gateway.messages.protocol import CountTokensRequest, MessagesRequest
from gateway.messages.render import MESSAGES, translate
from gateway.money.spend import prompt_upper_tokens
from gateway.wire.common import parse_body
from gateway.wire.format import Caller

PATH = "/v1/messages"  # served in the MESSAGES format (``FAMILY.formats``)
endpoints = APIRouter(route_class=TracedEndpoint, tags=["v1"], responses=MESSAGES_ERRORS)


@endpoints.post(PATH, name="messages", openapi_extra=request_body(MessagesRequest))
async def create_message(request: Request, call: TenantDep) -> Response:
    return await serve(request, call, MESSAGES)


@endpoints.post(
    "/v1/messages/count_tokens",
    name="messages_count_tokens",
    openapi_extra=request_body(CountTokensRequest),
)
async def count_tokens(request: Request, call: TenantDep) -> Response:
    """The prompt's tokens as the budget counts them before a request runs (an upper
    estimate on the tier the request would be routed to: translated as ``/v1/messages``
    translates it, with the same headers, so a forced tier and a session count as they
    would route); nothing runs, nothing is charged, nothing is cached."""
    core, principal = call.core, call.principal
    config = core.config
    raw = await read_body(request, config.server.max_body_bytes, config.server.header_timeout_s)
    body = parse_body(CountTokensRequest, raw).as_request()
    turn = translate(body, Caller(principal, config, request.headers, core.parts.responses))
    only = tier_only(turn.model, turn.generation, turn.session)
    ask = ask_for(principal, only, core_headers(request.headers))
    routed = await core.route(ask)  # no cache lookup; not traffic
    tokens = prompt_upper_tokens(config, turn.generation, routed.tier)
    headers = {"x-tiergate-tier": routed.tier, **turn.compat.headers()}
    return Response(
        orjson.dumps({"input_tokens": tokens}), media_type="application/json", headers=headers
    )


FAMILY = Family(
    (endpoints,),
    bodies=(MessagesRequest, CountTokensRequest),
    prefix=PATH,
    formats={PATH: MESSAGES},
    errors=MESSAGES.error_shape,
)
