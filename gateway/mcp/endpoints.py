"""``/mcp``: the MCP streamable-HTTP endpoint, the SDK's session manager behind the
gateway's API keys.

Every HTTP request is authenticated as a model call is (``Authorization: Bearer KEY`` or
``x-api-key``, looked up in ``state.keys``: a revoked key is refused from the moment the
key directory drops it), takes the policy snapshot with its key, and is counted against
``mcp.max_inflight``; then the SDK serves it. Errors before the SDK (a bad key, too many
at once, a store down) answer in JSON-RPC's shape with the HTTP status a model call
would get (the family's ``errors``). The few refusals the SDK answers in plain text (a
body over ``mcp.max_request_bytes``: 413; a ``Content-Type`` that is not JSON, or none: 400;
a bad ``Host`` or ``Origin``) are rewritten in the same JSON-RPC shape, their status kept.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson
from fastapi import APIRouter
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from gateway.edge.family import Family
from gateway.edge.http import authenticate, tenant_key
from gateway.errors import (
    ApiError,
    InsufficientQuota,
    InvalidRequest,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
)
from gateway.mcp.caller import MODEL_REQUEST_HEADER, SCOPE_KEY, Caller, allowlist_of
from gateway.mcp.errors import INSUFFICIENT_QUOTA, RATE_LIMITED, UNAVAILABLE
from gateway.mcp.service import McpService
from gateway.state import GatewayState

PATH = "/mcp"
MAX_REQUEST_ID = 128  # characters of a linked model call's id kept (tiergate's are 40)


def jsonrpc_error(error: ApiError, headers: dict[str, str]) -> Response:
    """An error before any JSON-RPC request was read: ``id`` null, the HTTP status and
    ``data`` (``type``, ``code``) as a model call's error would carry them."""
    if isinstance(error, InsufficientQuota):
        code = INSUFFICIENT_QUOTA
    elif isinstance(error, RateLimited):
        code = RATE_LIMITED
    elif error.status == 503:
        code = UNAVAILABLE
    elif error.status < 500:
        code = -32600  # invalid request
    else:
        code = -32603  # internal error
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": code,
            "message": error.message,
            "data": {"type": error.type, "code": error.code},
        },
    }
    return Response(
        orjson.dumps(body),
        status_code=error.status,
        headers={**error.headers, **headers},
        media_type="application/json",
    )


def jsonrpc_refusals(send: Send) -> Send:
    """``send``, with an error response that is not JSON (the SDK's plain-text refusals)
    rewritten as ``jsonrpc_error`` writes one, its status kept."""
    held: Message | None = None
    body = bytearray()

    async def sending(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start" and message["status"] >= 400:
            kind = dict(message.get("headers", [])).get(b"content-type", b"")
            if not kind.startswith(b"application/json"):
                held = message
                return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        body.extend(message.get("body", b""))
        if message.get("more_body", False):
            return
        status = held["status"]
        words = body.decode("utf-8", "replace").strip() or HTTPStatus(status).phrase
        error = PayloadTooLarge(words) if status == 413 else InvalidRequest(words)
        rewritten = jsonrpc_error(error, {})
        headers = [
            (name, value)
            for name, value in held.get("headers", [])
            if name.lower() not in (b"content-type", b"content-length")
        ]
        await send({**held, "headers": [*headers, *rewritten.raw_headers]})
        await send({"type": "http.response.body", "body": rewritten.body})

    return sending


class McpEndpoint:
    """The ASGI app at ``/mcp`` (the SDK's manager serves what passes the gate)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app: Any = scope["app"]
        state: GatewayState = app.state.tiergate
        service: McpService = app.state.tiergate_mcp
        request = Request(scope)
        principal = await authenticate(state.keys, tenant_key(request))
        core = state.core  # read right after the key: the request's one snapshot
        if request.method == "GET":
            # The stream a client may open for server-initiated messages: the gateway
            # sends none (spec: 405 says so), and an idle stream would hold a slot.
            await Response(status_code=405, headers={"Allow": "POST, DELETE"})(scope, receive, send)
            return
        if service.inflight >= core.config.mcp.max_inflight:
            raise Overloaded(
                "too many MCP requests at once; try again shortly", headers={"Retry-After": "1"}
            )
        headers = request.headers
        scope[SCOPE_KEY] = Caller(
            principal,
            core,
            allowlist_of(principal),
            headers,
            (headers.get(MODEL_REQUEST_HEADER) or "")[:MAX_REQUEST_ID] or None,
        )
        # A stateful session is bound to the key that opened it (the SDK compares this).
        token = AccessToken(
            token=principal.key_id, client_id=f"{principal.tenant}/{principal.key_id}", scopes=[]
        )
        scope["user"] = AuthenticatedUser(token)
        service.inflight += 1
        try:
            await service.manager.handle_request(scope, receive, jsonrpc_refusals(send))
        finally:
            service.inflight -= 1


endpoints = APIRouter(tags=["mcp"])
endpoints.routes.append(
    Route(PATH, McpEndpoint(), methods=["GET", "POST", "DELETE"], include_in_schema=False)
)

FAMILY = Family((endpoints,), prefix=PATH, errors=jsonrpc_error)
