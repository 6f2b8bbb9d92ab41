"""``GET /admin/api/audit``: who did what to the gateway, when, before and after.

``?format=csv`` exports the same entries as CSV; ``?limit=`` (default 200, at most
10,000) bounds how many, newest first. ``record`` is what every admin write calls.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.auth import admin_digest
from gateway.admin.deps import AdminDep
from gateway.admin.session import COOKIE
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import ADMIN_ERRORS
from gateway.state import GatewayState
from policies.stores.audit import MAX_ENTRIES, entry, to_csv

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["admin"], responses=ADMIN_ERRORS)
_ENTRIES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the entries, newest first: JSON, or CSV with format=csv",
        "content": {"text/csv": {"schema": {"type": "string"}}},
    }
}


def actor(request: Request, state: GatewayState) -> str:
    """Who is acting (after ``require_admin_access``): the admin key or a dashboard session,
    each named by a digest prefix, never by the secret itself."""
    if "authorization" in request.headers:
        return f"admin-key:{(admin_digest(state) or '')[:12]}"
    token = request.cookies.get(COOKIE, "")
    return f"session:{hashlib.sha256(token.encode()).hexdigest()[:12]}"


async def record(
    request: Request,
    state: GatewayState,
    action: str,
    target: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    await state.audit.append(entry(actor(request, state), action, target, before, after))


@endpoints.get("/admin/api/audit", responses=_ENTRIES)
async def audit_log(
    state: AdminDep,
    fmt: Annotated[Literal["json", "csv"], Query(alias="format")] = "json",
    limit: Annotated[int, Query(ge=1, le=MAX_ENTRIES)] = 200,
) -> Response:
    entries = await state.audit.recent(limit)
    if fmt == "csv":
        return Response(
            to_csv(entries),
            media_type="text/csv",
            headers={"content-disposition": 'attachment; filename="tiergate-audit.csv"'},
        )
    body = {"object": "list", "data": [e.model_dump(mode="json") for e in entries]}
    return Response(orjson.dumps(body), media_type="application/json")
