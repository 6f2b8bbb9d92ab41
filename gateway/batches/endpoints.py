"""``/v1/batches`` (OpenAI's Batch API) and the family: files, OpenAI batches and
Anthropic's message batches (``gateway.batches.message_batches``).

``POST /v1/batches`` checks the input file's lines and keeps the batch (its lines queued
for the runner, ``gateway.batches.runner``); ``GET`` shows its status and counts; the
output and error files are ordinary files once it has ended. A batch belongs to its
tenant: another tenant's batch, or a batch on another tenant's file, is a 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import Response

from gateway.batches import message_batches
from gateway.batches.file_endpoints import endpoints as file_endpoints
from gateway.batches.file_endpoints import files_of, json
from gateway.batches.intake import Order, checked_openai_lines, create, new_batch_id
from gateway.batches.jobs import cancel, key_digest, owned
from gateway.batches.protocol import OPENAI_ENDPOINTS, CreateBatch, CreateMessageBatch
from gateway.batches.render import batch_object
from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import GatewayEndpoint, read_body
from gateway.edge.openapi import errors, request_body
from gateway.errors import InvalidRequest
from gateway.wire.common import parse_body

endpoints = APIRouter(
    route_class=GatewayEndpoint, tags=["v1"], responses=errors(400, 401, 404, 413, 500, 503)
)


@endpoints.post("/v1/batches", name="create_batch", openapi_extra=request_body(CreateBatch))
async def create_batch(request: Request, call: TenantDep) -> Response:
    config = call.core.config
    raw = await read_body(request, config.server.max_body_bytes, config.server.header_timeout_s)
    body = parse_body(CreateBatch, raw)
    if body.endpoint not in OPENAI_ENDPOINTS:
        raise InvalidRequest(
            f"endpoint must be one of {', '.join(OPENAI_ENDPOINTS)}", param="endpoint"
        )
    files = files_of(call)
    source = await files.get(call.principal.tenant, body.input_file_id)
    if source.purpose != "batch":
        raise InvalidRequest(
            f"the file {source.id} has purpose {source.purpose!r}, not 'batch'",
            param="input_file_id",
        )
    batch_id = new_batch_id("openai")
    lines = await checked_openai_lines(
        await files.content(source), body.endpoint, batch_id, config.batches
    )
    expiry = body.output_expires_after
    order = Order(
        call.principal,
        key_digest(request),
        "openai",
        body.endpoint,
        batch_id,
        input_file_id=source.id,
        metadata=body.metadata,
        output_ttl_s=expiry.seconds if expiry is not None else 0,
    )
    return json(batch_object(await create(files, config.batches, order, lines)))


@endpoints.get("/v1/batches", name="list_batches")
async def list_batches(
    call: TenantDep, after: str | None = None, limit: int = Query(20, ge=1, le=100)
) -> Response:
    found = [
        b for b in await call.core.parts.batches.batches(call.principal.tenant) if b.api == "openai"
    ]
    found.reverse()  # newest first
    ids = [b.id for b in found]
    start = ids.index(after) + 1 if after in ids else 0
    page = found[start : start + limit]
    return json(_page([batch_object(b) for b in page], start + limit < len(found)))


def _page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


@endpoints.get("/v1/batches/{batch_id}", name="get_batch")
async def get_batch(batch_id: str, call: TenantDep) -> Response:
    return json(batch_object(await owned(call, batch_id, "openai")))


@endpoints.post("/v1/batches/{batch_id}/cancel", name="cancel_batch")
async def cancel_batch(batch_id: str, call: TenantDep) -> Response:
    return json(batch_object(await cancel(call, await owned(call, batch_id, "openai"))))


FAMILY = Family(
    (file_endpoints, endpoints, message_batches.endpoints),
    bodies=(CreateBatch, CreateMessageBatch),
)
