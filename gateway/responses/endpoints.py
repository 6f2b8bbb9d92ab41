"""``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}``, ``GET …/input_items``.

A Responses request runs exactly as a chat request does (one ``serve`` call on the
serving core: auth, rate limits, budget, both caches, ``auto``, ledger, metrics,
traces); its format (``gateway.responses.serving``: the stored conversation, the
translation, the rendering, keeping the Response) is its own. Fields the gateway accepts
without honouring are named in ``x-tiergate-ignored`` (``gateway.wire.compat``). Stored
Responses are the key's own (``policies.stores.responses``).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import Response

from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import TracedEndpoint
from gateway.edge.openapi import GENERATION_ERRORS, request_body
from gateway.edge.respond import serve
from gateway.errors import InvalidRequest, NotFound
from gateway.responses.protocol import CreateResponse
from gateway.responses.serving import RESPONSES, load
from gateway.wire.compat import unsupported
from policies.stores.responses import ResponseStore, StoredResponse
from policies.tenants import Principal

log = logging.getLogger(__name__)

PATH = "/v1/responses"  # served in the RESPONSES format (``FAMILY.formats``)
endpoints = APIRouter(route_class=TracedEndpoint, tags=["v1"], responses=GENERATION_ERRORS)
stored = APIRouter(tags=["v1"], responses=GENERATION_ERRORS)


@endpoints.post(PATH, name="responses", openapi_extra=request_body(CreateResponse))
async def create_response(request: Request, call: TenantDep) -> Response:
    return await serve(request, call, RESPONSES)


@stored.get("/v1/responses/{response_id}", name="get_response")
async def get_response(response_id: str, call: TenantDep, stream: bool = False) -> Response:
    if stream:
        raise unsupported("stream", "a stored response is not replayed as events")
    record = await _owned(call.core.parts.responses, call.principal, response_id)
    return _json(record.response)


@stored.delete("/v1/responses/{response_id}", name="delete_response")
async def delete_response(response_id: str, call: TenantDep) -> Response:
    deleted = await call.core.parts.responses.delete(call.principal, response_id)
    if not deleted:
        raise _missing(response_id)
    return _json({"id": response_id, "object": "response", "deleted": True})


@stored.get("/v1/responses/{response_id}/input_items", name="response_input_items")
async def input_items(
    response_id: str,
    call: TenantDep,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Response:
    record = await _owned(call.core.parts.responses, call.principal, response_id)
    items = list(record.input if order == "asc" else reversed(record.input))
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise InvalidRequest(f"no input item {after!r} in this response", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return _json(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


async def _owned(store: ResponseStore, principal: Principal, response_id: str) -> StoredResponse:
    record = await load(store, principal, response_id)
    if record is None:
        raise _missing(response_id)
    return record


def _missing(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


FAMILY = Family((endpoints, stored), bodies=(CreateResponse,), formats={PATH: RESPONSES})
