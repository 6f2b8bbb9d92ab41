"""``/v1/messages/batches``: Anthropic's Message Batches API, in its shapes.

Every request of a batch is a Messages body run as ``POST /v1/messages`` would run it
(``gateway.batches.lines``); ``results`` is JSONL, one ``{"custom_id", "result"}`` per
request once the batch has ended. Errors on these paths take Anthropic's shape (the
error boundary answers ``/v1/messages*`` so, ``gateway.messages``' family prefix).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import Response

from gateway.batches.file_endpoints import files_of, json
from gateway.batches.intake import Order, anthropic_lines, create, new_batch_id
from gateway.batches.jobs import cancel, key_digest, owned
from gateway.batches.protocol import MESSAGES_ENDPOINT, CreateMessageBatch
from gateway.batches.render import message_batch
from gateway.edge.deps import TenantDep
from gateway.edge.http import GatewayEndpoint, TenantCall, read_body
from gateway.edge.openapi import MESSAGES_ERRORS, request_body
from gateway.errors import InvalidRequest
from gateway.guardrails.values import guard_value
from gateway.wire.common import parse_body
from policies.stores.batch_records import ENDED, LineResult

ERRORS = {k: v for k, v in MESSAGES_ERRORS.items() if k != 200}
JSONL: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/binary": {"schema": {"type": "string"}}}}
}

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["v1"], responses=ERRORS)


@endpoints.post(
    "/v1/messages/batches",
    name="create_message_batch",
    openapi_extra=request_body(CreateMessageBatch),
)
async def create_message_batch(request: Request, call: TenantDep) -> Response:
    spec = call.core.config.batches
    raw = await read_body(request, spec.file_limit, call.core.config.server.header_timeout_s)
    # Each request's ``params`` may nest as deep as ``/v1/messages`` takes, no deeper:
    # ``anthropic_lines`` checks them one by one (the model takes nothing else nested).
    body = parse_body(CreateMessageBatch, raw, depth=None)
    batch_id = new_batch_id("anthropic")
    order = Order(call.principal, key_digest(request), "anthropic", MESSAGES_ENDPOINT, batch_id)
    requests = [
        r.model_copy(update={"params": guarded_params(call, i, r.params)})
        for i, r in enumerate(body.requests)
    ]
    record = await create(files_of(call), spec, order, anthropic_lines(requests))
    return json(message_batch(record, str(request.base_url)))


def guarded_params(call: TenantCall, index: int, params: Any) -> Any:
    """A request's params as the tenant's ``guardrails:`` leaves them: the batch is
    kept, so a value is never (``local`` included); a ``block`` value refuses it."""
    metrics = call.core.parts.metrics
    where = f"requests[{index}].params"
    return guard_value(call.principal, params, where, remote=False, kept=True, metrics=metrics)


@endpoints.get("/v1/messages/batches", name="list_message_batches")
async def list_message_batches(
    request: Request,
    call: TenantDep,
    after_id: str | None = None,
    before_id: str | None = None,
    limit: int = Query(20, ge=1, le=1000),
) -> Response:
    found = [
        b
        for b in await call.core.parts.batches.batches(call.principal.tenant)
        if b.api == "anthropic"
    ]
    found.reverse()  # newest first
    ids = [b.id for b in found]
    if before_id in ids:
        end = ids.index(before_id)
        page, has_more = found[max(end - limit, 0) : end], end - limit > 0
    else:
        start = ids.index(after_id) + 1 if after_id in ids else 0
        page, has_more = found[start : start + limit], start + limit < len(found)
    base = str(request.base_url)
    return json(
        {
            "data": [message_batch(b, base) for b in page],
            "has_more": has_more,
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
        }
    )


@endpoints.get("/v1/messages/batches/{message_batch_id}", name="get_message_batch")
async def get_message_batch(message_batch_id: str, request: Request, call: TenantDep) -> Response:
    record = await owned(call, message_batch_id, "anthropic")
    return json(message_batch(record, str(request.base_url)))


@endpoints.get(
    "/v1/messages/batches/{message_batch_id}/results",
    name="message_batch_results",
    responses=JSONL,
)
async def message_batch_results(message_batch_id: str, call: TenantDep) -> Response:
    record = await owned(call, message_batch_id, "anthropic")
    if record.status not in ENDED:
        raise InvalidRequest(f"the batch {record.id} is still processing: no results yet")
    results = await call.core.parts.batches.results(record.tenant, record.id)
    lines = (LineResult.decode(results[i])[1] + b"\n" for i in sorted(results))
    return Response(b"".join(lines), media_type="application/binary")


@endpoints.post("/v1/messages/batches/{message_batch_id}/cancel", name="cancel_message_batch")
async def cancel_message_batch(
    message_batch_id: str, request: Request, call: TenantDep
) -> Response:
    record = await cancel(call, await owned(call, message_batch_id, "anthropic"))
    return json(message_batch(record, str(request.base_url)))


@endpoints.delete("/v1/messages/batches/{message_batch_id}", name="delete_message_batch")
async def delete_message_batch(message_batch_id: str, call: TenantDep) -> Response:
    record = await owned(call, message_batch_id, "anthropic")
    if record.status not in ENDED:
        raise InvalidRequest(
            f"the batch {record.id} has not ended: cancel it and wait for it to end first"
        )
    await call.core.parts.batches.remove_batch(record.tenant, record.id)
    return json({"id": record.id, "type": "message_batch_deleted"})
