"""``/admin/api/keys``: issue, list, change and revoke API keys at run time.

``POST`` returns the raw key once (``tg-`` + 32 random bytes); only its digest is stored.
Every write bumps the key store's version, which every replica polls, and is written to
the audit log. Admin key (Bearer) or dashboard session.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.audit import record
from gateway.admin.budgets import NotFound
from gateway.admin.deps import AdminDep
from gateway.admin.protocol import KeyCreate, KeyScopeFields, KeyUpdate
from gateway.edge.http import GatewayEndpoint, read_body
from gateway.edge.openapi import ADMIN_ERRORS, request_body
from gateway.errors import InvalidRequest
from gateway.state import GatewayState
from gateway.wire.common import parse_body
from policies.stores.budget import Scope, key_scope
from policies.stores.keys import KeyScope, ManagedKey, issue_key, tier_problems

BODY_LIMIT = 64 * 1024
M = TypeVar("M", bound=KeyScopeFields)
endpoints = APIRouter(
    route_class=GatewayEndpoint, prefix="/admin/api/keys", tags=["admin"], responses=ADMIN_ERRORS
)


async def _body(request: Request, state: GatewayState, model: type[M]) -> M:
    timeout = state.config.server.header_timeout_s
    return parse_body(model, await read_body(request, BODY_LIMIT, timeout))


def _ts(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _scope(fields: KeyScopeFields, base: KeyScope) -> KeyScope:
    sent = fields.model_fields_set
    changes: dict[str, Any] = {}
    if "expires_at" in sent:
        changes["expires_at"] = _ts(fields.expires_at)
    for name in ("allowed_tiers", "allowed_models", "mcp_tools"):
        if name in sent:
            value = getattr(fields, name)
            changes[name] = None if value is None else tuple(value)
    for name in ("budget", "rate_limit", "metadata", "mcp_rate_limit"):
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
        "mcp_tools": scope.mcp_tools,
        "mcp_rate_limit": None
        if scope.mcp_rate_limit is None
        else scope.mcp_rate_limit.model_dump(),
    }


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


async def _existing(state: GatewayState, key_id: str) -> ManagedKey:
    key = await state.keys.store.get(key_id)
    if key is None:
        raise NotFound(f"no API key {key_id!r}", param="id")
    return key


async def _save(request: Request, state: GatewayState, action: str, old: ManagedKey | None,
                new: ManagedKey) -> None:  # fmt: skip
    await state.keys.store.put(new)
    state.keys.changed()  # this replica at once; the others on their next poll
    now = time.time()
    await record(request, state, action, new.id,
                 None if old is None else key_body(old, now), key_body(new, now))  # fmt: skip


@endpoints.post("", status_code=201, openapi_extra=request_body(KeyCreate))
async def create_key(request: Request, state: AdminDep) -> Response:
    body = await _body(request, state, KeyCreate)
    await state.keys.load_tenants()  # a tenant made a moment ago on another replica
    scope = _scope(body, KeyScope())
    _check(state, body.tenant, scope)
    raw, key = issue_key(body.tenant, body.name, scope)
    await _save(request, state, "key.create", None, key)
    return _json({**key_body(key, time.time()), "key": raw}, 201)


@endpoints.get("")
async def list_keys(state: AdminDep, tenant: str | None = None) -> Response:
    keys = await state.keys.store.list(tenant or None)
    used = await state.keys.store.last_used()
    scopes = [Scope(key_scope(k.tenant, k.id), k.scope.budget) for k in keys]
    spend = {s.scope: s for s in await state.parts.money.budgets.status(scopes)} if scopes else {}
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


@endpoints.patch("/{key_id}", openapi_extra=request_body(KeyUpdate))
async def update_key(request: Request, key_id: str, state: AdminDep) -> Response:
    body = await _body(request, state, KeyUpdate)
    old = await _existing(state, key_id)
    if old.revoked_at is not None:
        raise InvalidRequest(f"API key {old.id!r} is revoked; issue a new one", param="id")
    scope = _scope(body, old.scope)
    _check(state, old.tenant, scope)
    name = body.name if "name" in body.model_fields_set else old.name
    new = old.model_copy(update={"scope": scope, "name": name})
    await _save(request, state, "key.update", old, new)
    return _json(key_body(new, time.time()))


@endpoints.delete("/{key_id}")
async def revoke_key(request: Request, key_id: str, state: AdminDep) -> Response:
    old = await _existing(state, key_id)
    if old.revoked_at is not None:
        return _json(key_body(old, time.time()))
    new = old.model_copy(update={"revoked_at": time.time()})
    await _save(request, state, "key.revoke", old, new)
    return _json(key_body(new, time.time()))
