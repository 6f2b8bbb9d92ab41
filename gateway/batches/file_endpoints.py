"""``/v1/files``: upload a batch input file (multipart, ``purpose: batch``), list, read,
download and delete a tenant's files (OpenAI's Files API, the part batches use).

A file belongs to the tenant whose key uploaded it; another tenant's is a 404, as a file
that never existed. A file over the size limit (``batches.max_file_bytes``, or
``store_max_bytes`` without a bucket) is refused before anything is kept.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import Response

from gateway.batches.files import Files, missing
from gateway.batches.render import file_object
from gateway.edge.deps import TenantDep
from gateway.edge.http import GatewayEndpoint, TenantCall, read_body
from gateway.edge.openapi import errors
from gateway.errors import InvalidRequest
from gateway.guardrails.values import guard_jsonl

MULTIPART_OVERHEAD = 64 * 1024  # the form's other fields and boundaries
UPLOAD = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {"type": "string", "enum": ["batch"]},
                        "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
                        "expires_after[seconds]": {"type": "integer"},
                    },
                }
            }
        },
    }
}
BINARY: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/octet-stream": {"schema": {"type": "string"}}}}
}

endpoints = APIRouter(
    route_class=GatewayEndpoint, tags=["v1"], responses=errors(400, 401, 404, 413, 500, 503)
)


def json(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


def files_of(call: TenantCall) -> Files:
    parts = call.core.parts
    return Files(call.core.config.batches, parts.batches, parts.bucket)


async def _form(request: Request, raw: bytes) -> FormData:
    """The multipart form of a body already read (and bounded); a broken form is
    Starlette's 400, answered in OpenAI's shape by the error boundary."""

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    return await Request(request.scope, replay).form(max_files=1, max_fields=16)


def _ttl(form: FormData, default_s: float) -> float:
    seconds = form.get("expires_after[seconds]")
    if seconds is None:
        return default_s
    if form.get("expires_after[anchor]") != "created_at":
        raise InvalidRequest("expires_after.anchor must be created_at", param="expires_after")
    try:
        value = int(str(seconds))
    except ValueError:
        raise InvalidRequest(
            "expires_after.seconds must be an integer", param="expires_after"
        ) from None
    if not 3600 <= value <= 2_592_000:
        raise InvalidRequest(
            "expires_after.seconds must be between 3600 and 2592000", param="expires_after"
        )
    return float(value)


@endpoints.post("/v1/files", name="create_file", openapi_extra=UPLOAD)
async def create_file(request: Request, call: TenantDep) -> Response:
    files = files_of(call)
    spec = files.spec
    raw = await read_body(request, spec.file_limit + MULTIPART_OVERHEAD)
    form = await _form(request, raw)
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("file: a file part is required", param="file")
        if form.get("purpose") != "batch":
            raise InvalidRequest("purpose: only 'batch' files are kept here", param="purpose")
        content = await upload.read()
    finally:
        await form.close()
    if not content.strip():
        raise InvalidRequest("file: the file is empty", param="file")
    ttl = _ttl(form, spec.file_ttl_s)
    # kept as the tenant's ``guardrails:`` leaves it: the bucket and the store never hold a value
    content = guard_jsonl(call.principal, content, call.core.parts.metrics)
    record = await files.keep(
        call.principal.tenant, upload.filename or "upload.jsonl", "batch", content, ttl
    )
    return json(file_object(record))


@endpoints.get("/v1/files", name="list_files")
async def list_files(
    call: TenantDep,
    after: str | None = None,
    limit: int = Query(10_000, ge=1, le=10_000),
    order: Literal["asc", "desc"] = "desc",
    purpose: str | None = None,
) -> Response:
    found = await files_of(call).store.files(call.principal.tenant)
    if purpose is not None:
        found = [f for f in found if f.purpose == purpose]
    if order == "desc":
        found.reverse()
    ids = [f.id for f in found]
    start = ids.index(after) + 1 if after in ids else 0
    page = found[start : start + limit]
    return json(
        {
            "object": "list",
            "data": [file_object(f) for f in page],
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
            "has_more": start + limit < len(found),
        }
    )


@endpoints.get("/v1/files/{file_id}", name="get_file")
async def get_file(file_id: str, call: TenantDep) -> Response:
    return json(file_object(await files_of(call).get(call.principal.tenant, file_id)))


@endpoints.get("/v1/files/{file_id}/content", name="file_content", responses=BINARY)
async def file_content(file_id: str, call: TenantDep) -> Response:
    files = files_of(call)
    record = await files.get(call.principal.tenant, file_id)
    return Response(await files.content(record), media_type="application/octet-stream")


@endpoints.delete("/v1/files/{file_id}", name="delete_file")
async def delete_file(file_id: str, call: TenantDep) -> Response:
    if await files_of(call).remove(call.principal.tenant, file_id) is None:
        raise missing(file_id)
    return json({"id": file_id, "object": "file", "deleted": True})
