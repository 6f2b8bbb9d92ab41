"""``POST /v1/embeddings``: HTTP only (the body in, the answer out); the call runs on the
core's embeddings entrance (``ServingCore.embed``), as a batch line's does."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.entrance import Options
from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import TracedEndpoint, read_body, until_disconnect
from gateway.edge.openapi import errors, request_body
from gateway.telemetry.timing import lap
from gateway.wire.common import parse_body
from gateway.wire.embeddings import EmbeddingRequest

endpoints = APIRouter(
    route_class=TracedEndpoint,
    tags=["v1"],
    responses=errors(400, 401, 403, 404, 408, 413, 429, 500, 502, 503, 504),
)


@endpoints.post("/v1/embeddings", name="embeddings", openapi_extra=request_body(EmbeddingRequest))
async def embeddings(request: Request, call: TenantDep) -> Response:
    server = call.core.config.server  # the request's snapshot (see gateway.edge.deps.tenant_call)
    raw = await read_body(request, server.max_body_bytes, server.header_timeout_s)
    body = parse_body(EmbeddingRequest, raw)
    lap("parse")
    # No header changes how an embedding runs: no cache, no tier, no session.
    work = call.core.embed(call.principal, body, Options())
    embedded = await until_disconnect(request, work)
    return Response(
        orjson.dumps(embedded.body, option=orjson.OPT_SERIALIZE_NUMPY),
        media_type="application/json",
        headers=embedded.headers,
    )


FAMILY = Family((endpoints,), bodies=(EmbeddingRequest,))
