"""``/admin/api/keys``: issue, list, change and revoke API keys at run time.

``POST`` returns the raw key once (``tg-`` + 32 random bytes); only its digest is stored.
Every write bumps the key store's version, which every replica polls, and is written to
the audit log. Admin key (Bearer) or dashboard session.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.access import require_admin_access
from gateway.errors import InvalidRequest
from gateway.http import read_body
from gateway.routes import admin_audit, admin_tenants
from gateway.routes.admin_audit import record, store_unavailable
from gateway.routes.admin_budgets import NotFound
from gateway.state import GatewayState, get_state
from gateway.wire.common import parse_body
from policies.budget import Scope, key_scope
from policies.keys import KeyScope, ManagedKey, issue_key, tier_problems
from policies.schema import BudgetSpec, RateLimitSpec
from policies.store import StoreUnavailable

BODY_LIMIT = 64 * 1024


class ScopeFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("", max_length=200)
    expires_at: datetime | None = None  # ISO 8601 (UTC unless it says) or unix seconds
    allowed_tiers: list[str] | None = None
    allowed_models: list[str] | None = None
    budget: BudgetSpec | None = None
    rate_limit: RateLimitSpec | None = None
    metadata: dict[str, str] = Field(default_factory=dict, max_length=32)


class KeyCreate(ScopeFields):
    tenant: str = Field(min_length=1, max_length=128)


class KeyUpdate(ScopeFields):
    """Only the fields sent change; ``null`` clears one (no expiry, no cap, any tier)."""


def _ts(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _scope(fields: ScopeFields, base: KeyScope) -> KeyScope:
    sent = fields.model_fields_set
    changes: dict[str, Any] = {}
    if "expires_at" in sent:
        changes["expires_at"] = _ts(fields.expires_at)
    for name in ("allowed_tiers", "allowed_models"):
        if name in sent:
            value = getattr(fields, name)
            changes[name] = None if value is None else tuple(value)
    for name in ("budget", "rate_limit", "metadata"):
        if name in sent:
            changes[name] = getattr(fields, name)
    return base.model_copy(update=changes)


def _check(state: GatewayState, tenant: str, scope: KeyScope) -> None:
    policy = state.keys.tenant(tenant)
    if policy is None:
        raise NotFound(f"no tenant {tenant!r}", param="tenant")
    problems = tier_problems(state.config, policy, scope)
    if problems:
        raise InvalidRequest("; ".join(problems), param="allowed_tiers")
    if scope.expires_at is not None and scope.expires_at <= time.time():
        raise InvalidRequest("expires_at is in the past", param="expires_at")


def key_body(key: ManagedKey, now: float, last_used: float | None = None) -> dict[str, Any]:
    scope = key.scope
    status = "revoked" if key.revoked_at is not None else "active" if key.active(now) else "expired"
    return {
        "id": key.id,
        "object": "api_key",
        "tenant": key.tenant,
        "name": key.name,
        "last4": key.last4,
        "status": status,
        "created_at": _iso(key.created_at),
        "expires_at": _iso(scope.expires_at),
        "revoked_at": _iso(key.revoked_at),
        "last_used_at": _iso(last_used),
        "allowed_tiers": scope.allowed_tiers,
        "allowed_models": scope.allowed_models,
        "budget": None if scope.budget is None else scope.budget.model_dump(),
        "rate_limit": None if scope.rate_limit is None else scope.rate_limit.model_dump(),
        "metadata": scope.metadata,
    }


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


async def _existing(state: GatewayState, key_id: str) -> ManagedKey:
    try:
        key = await state.keys.store.get(key_id)
    except StoreUnavailable as exc:
        raise store_unavailable("key", exc) from exc
    if key is None:
        raise NotFound(f"no API key {key_id!r}", param="id")
    return key


async def _save(request: Request, state: GatewayState, action: str, old: ManagedKey | None,
                new: ManagedKey) -> None:  # fmt: skip
    try:
        await state.keys.store.put(new)
    except StoreUnavailable as exc:
        raise store_unavailable("key", exc) from exc
    state.keys.changed()  # this replica at once; the others on their next poll
    now = time.time()
    await record(request, state, action, new.id,
                 None if old is None else key_body(old, now), key_body(new, now))  # fmt: skip


async def create_key(request: Request) -> Response:
    state = get_state(request)
    await require_admin_access(request, state)
    body = parse_body(KeyCreate, await read_body(request, BODY_LIMIT))
    try:
        await state.keys.load_tenants()  # a tenant made a moment ago on another replica
    except StoreUnavailable as exc:
        raise store_unavailable("key", exc) from exc
    scope = _scope(body, KeyScope())
    _check(state, body.tenant, scope)
    raw, key = issue_key(body.tenant, body.name, scope)
    await _save(request, state, "key.create", None, key)
    return _json({**key_body(key, time.time()), "key": raw}, 201)


async def list_keys(request: Request) -> Response:
    state = get_state(request)
    await require_admin_access(request, state)
    tenant = request.query_params.get("tenant") or None
    try:
        keys = await state.keys.store.list(tenant)
        used = await state.keys.store.last_used()
        scopes = [Scope(key_scope(k.tenant, k.id), k.scope.budget) for k in keys]
        spend = {s.scope: s for s in await state.budgets.status(scopes)} if scopes else {}
    except StoreUnavailable as exc:
        raise store_unavailable("key", exc) from exc
    now, rows = time.time(), []
    for key in keys:
        status = spend[key_scope(key.tenant, key.id)]
        rows.append(
            {
                **key_body(key, now, used.get(key.id)),
                "spend_usd": status.spent_usd,
                "spend_window": status.window,
            }
        )
    return _json({"object": "list", "data": rows})


async def update_key(request: Request) -> Response:
    state = get_state(request)
    await require_admin_access(request, state)
    body = parse_body(KeyUpdate, await read_body(request, BODY_LIMIT))
    old = await _existing(state, request.path_params["key_id"])
    if old.revoked_at is not None:
        raise InvalidRequest(f"API key {old.id!r} is revoked; issue a new one", param="id")
    scope = _scope(body, old.scope)
    _check(state, old.tenant, scope)
    name = body.name if "name" in body.model_fields_set else old.name
    new = old.model_copy(update={"scope": scope, "name": name})
    await _save(request, state, "key.update", old, new)
    return _json(key_body(new, time.time()))


async def revoke_key(request: Request) -> Response:
    state = get_state(request)
    await require_admin_access(request, state)
    old = await _existing(state, request.path_params["key_id"])
    if old.revoked_at is not None:
        return _json(key_body(old, time.time()))
    new = old.model_copy(update={"revoked_at": time.time()})
    await _save(request, state, "key.revoke", old, new)
    return _json(key_body(new, time.time()))


def add_routes(app: Starlette) -> None:
    """Keys, runtime tenants and the audit log (one line in ``gateway.app``)."""
    app.add_route("/admin/api/keys", create_key, methods=["POST"])
    app.add_route("/admin/api/keys", list_keys, methods=["GET"])
    app.add_route("/admin/api/keys/{key_id}", update_key, methods=["PATCH"])
    app.add_route("/admin/api/keys/{key_id}", revoke_key, methods=["DELETE"])
    app.add_route("/admin/api/tenants", admin_tenants.list_tenants, methods=["GET"])
    app.add_route("/admin/api/tenants", admin_tenants.create_tenant, methods=["POST"])
    app.add_route("/admin/api/tenants/{name}", admin_tenants.update_tenant, methods=["PATCH"])
    app.add_route("/admin/api/tenants/{name}", admin_tenants.delete_tenant, methods=["DELETE"])
    app.add_route("/admin/api/audit", admin_audit.audit_log, methods=["GET"])
