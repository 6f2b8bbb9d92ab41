"""``GET``/``PUT /admin/api/budgets`` and spend by day (admin key or dashboard session).

``PUT`` stores a runtime override in the budget store (Redis), so every replica
applies it from its next reservation on; ``{"reset": true}`` returns to the YAML cap.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.audit import record
from gateway.admin.deps import AdminDep
from gateway.admin.protocol import BudgetUpdate
from gateway.edge.http import GatewayEndpoint, read_body
from gateway.edge.openapi import ADMIN_ERRORS, request_body
from gateway.errors import ApiError, InvalidRequest
from gateway.state import GatewayState
from gateway.wire.common import parse_body
from policies.schema import BudgetSpec
from policies.stores.budget import GLOBAL_SCOPE, Scope, ScopeStatus, key_scope, tenant_scope
from policies.stores.spending import tenant_scopes
from policies.stores.store import StoreUnavailable

MAX_DAYS = 400
endpoints = APIRouter(
    route_class=GatewayEndpoint, prefix="/admin/api/budgets", tags=["admin"], responses=ADMIN_ERRORS
)


class NotFound(ApiError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


def _status_body(status: ScopeStatus) -> dict[str, Any]:
    return {
        "scope": status.scope,
        "limit_usd": status.limit_usd,
        "window": status.window,
        "spent_usd": status.spent_usd,
        "held_usd": status.held_usd,
        "remaining_usd": status.remaining_usd,
        "overridden": status.overridden,
    }


def _json(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


def _unavailable(exc: StoreUnavailable) -> ApiError:
    error = ApiError(f"the budget store is unreachable: {exc}", code="budget_unavailable")
    error.status = 503
    return error


@endpoints.get("")
async def list_budgets(state: AdminDep) -> Response:
    config = state.config
    scopes = [Scope(GLOBAL_SCOPE, config.budgets.global_budget)]
    for tenant in config.tenants:
        scopes += tenant_scopes(config, tenant)
    try:
        statuses = {s.scope: s for s in await state.parts.money.budgets.status(scopes)}
    except StoreUnavailable as exc:
        raise _unavailable(exc) from exc
    tenants = []
    for tenant, policy in config.tenants.items():
        own = statuses[tenant_scope(tenant)]
        tenants.append(
            {
                "tenant": tenant,
                "on_budget_exceeded": policy.on_budget_exceeded,
                **_status_body(own),
                "keys": [
                    {"key_id": k.id, **_status_body(statuses[key_scope(tenant, k.id)])}
                    for k in policy.keys
                ],
            }
        )
    return _json({"global": _status_body(statuses[GLOBAL_SCOPE]), "tenants": tenants})


def _scope_name(state: GatewayState, update: BudgetUpdate) -> str:
    if update.scope == "global":
        return GLOBAL_SCOPE
    assert update.tenant is not None
    policy = state.config.tenants.get(update.tenant)
    if policy is None:
        raise NotFound(f"no tenant {update.tenant!r}", param="tenant")
    if update.scope == "tenant":
        return tenant_scope(update.tenant)
    assert update.key_id is not None
    if not any(k.id == update.key_id for k in policy.keys):
        raise NotFound(f"tenant {update.tenant!r} has no key {update.key_id!r}", param="key_id")
    return key_scope(update.tenant, update.key_id)


@endpoints.put("", openapi_extra=request_body(BudgetUpdate))
async def set_budget(request: Request, state: AdminDep) -> Response:
    timeout = state.config.server.header_timeout_s
    update = parse_body(BudgetUpdate, await read_body(request, 64 * 1024, timeout))
    scope = _scope_name(state, update)
    limit = (
        None
        if update.limit_usd is None
        else BudgetSpec(limit_usd=update.limit_usd, window=update.window)
    )
    try:
        (before,) = await state.parts.money.budgets.status([Scope(scope, None)])
        if update.reset:
            await state.parts.money.budgets.clear_limit(scope)
        else:
            await state.parts.money.budgets.set_limit(scope, limit)
    except StoreUnavailable as exc:
        raise _unavailable(exc) from exc
    after = {"limit_usd": update.limit_usd, "window": update.window, "reset": update.reset}
    await record(request, state, "budget.set", scope, _status_body(before), after)
    return _json({"scope": scope, "reset": update.reset, "limit_usd": update.limit_usd})


def _day(text: str | None, default: date, name: str) -> date:
    if text is None:
        return default
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"{name} must be a date (YYYY-MM-DD)", param=name) from None


@endpoints.get("/spend")
async def spend_by_day(
    state: AdminDep,
    start: str | None = None,
    end: str | None = None,
    tenant: str | None = None,
) -> Response:
    """Per tenant and UTC day in [start, end] (default: the last 7 days)."""
    today = datetime.now(UTC).date()
    last = _day(end, today, "end")
    first = _day(start, last - timedelta(days=6), "start")
    if first > last or (last - first).days >= MAX_DAYS:
        raise InvalidRequest(f"start must be on or before end, at most {MAX_DAYS} days")
    wanted = tenant
    known = state.keys.tenant_names()
    if wanted is not None and wanted not in known:
        raise NotFound(f"no tenant {wanted!r}", param="tenant")
    tenants = [wanted] if wanted is not None else known
    try:
        days = await state.parts.money.ledger.daily(tenants, first, last)
    except StoreUnavailable as exc:
        raise _unavailable(exc) from exc
    rows = [{"tenant": d.tenant, "day": d.day, **d.values} for d in days]
    return _json({"start": first.isoformat(), "end": last.isoformat(), "days": rows})
