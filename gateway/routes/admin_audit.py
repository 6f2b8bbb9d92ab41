"""``GET /admin/api/audit``: who did what to the gateway, when, before and after.

``?format=csv`` exports the same entries as CSV; ``?limit=`` (default 200, at most
10,000) bounds how many, newest first. ``record`` is what every admin write calls.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.access import require_admin_access
from gateway.admin.session import COOKIE
from gateway.admin_auth import admin_digest
from gateway.errors import ApiError, InvalidRequest
from gateway.state import GatewayState, get_state
from policies.audit import MAX_ENTRIES, entry, to_csv
from policies.store import StoreUnavailable


def store_unavailable(what: str, exc: StoreUnavailable) -> ApiError:
    error = ApiError(f"the {what} store is unreachable: {exc}", code="store_unavailable")
    error.status = 503
    return error


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
    try:
        await state.audit.append(entry(actor(request, state), action, target, before, after))
    except StoreUnavailable as exc:
        raise store_unavailable("audit", exc) from exc


async def audit_log(request: Request) -> Response:
    state = get_state(request)
    await require_admin_access(request, state)
    fmt = request.query_params.get("format", "json")
    if fmt not in ("json", "csv"):
        raise InvalidRequest("format must be json or csv", param="format")
    try:
        limit = int(request.query_params.get("limit", "200"))
    except ValueError:
        raise InvalidRequest("limit must be an integer", param="limit") from None
    if not 1 <= limit <= MAX_ENTRIES:
        raise InvalidRequest(f"limit must be between 1 and {MAX_ENTRIES}", param="limit")
    try:
        entries = await state.audit.recent(limit)
    except StoreUnavailable as exc:
        raise store_unavailable("audit", exc) from exc
    if fmt == "csv":
        return Response(
            to_csv(entries),
            media_type="text/csv",
            headers={"content-disposition": 'attachment; filename="tiergate-audit.csv"'},
        )
    body = {"object": "list", "data": [e.model_dump(mode="json") for e in entries]}
    return Response(orjson.dumps(body), media_type="application/json")
