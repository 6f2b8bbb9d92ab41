"""``/admin/api/tenants``: tenants created at run time, beside the YAML ones.

A runtime tenant has every field a YAML tenant has (budget, rate limit, tier rules,
cache policy...) except ``keys``, which are issued with ``POST /admin/api/keys``.
YAML tenants are listed too, marked read-only: change them in the file and reload.
Deleting a runtime tenant revokes its keys.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.audit import record
from gateway.admin.budgets import NotFound
from gateway.admin.deps import AdminDep
from gateway.admin.protocol import TenantCreate, TenantUpdate
from gateway.edge.http import GatewayEndpoint, read_body
from gateway.edge.openapi import ADMIN_ERRORS, errors, request_body
from gateway.errors import ApiError, InvalidRequest, PermissionDenied
from gateway.state import GatewayState
from gateway.wire.common import parse_body
from policies.schema import TenantSpec
from policies.stores.keys import runtime_tenant, tenant_fields, tier_problems

BODY_LIMIT = 64 * 1024
M = TypeVar("M", bound=BaseModel)
endpoints = APIRouter(
    route_class=GatewayEndpoint,
    prefix="/admin/api/tenants",
    tags=["admin"],
    responses={**ADMIN_ERRORS, **errors(409)},
)


class Conflict(ApiError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


def _read_only(name: str) -> PermissionDenied:
    return PermissionDenied(
        f"tenant {name!r} is defined in the YAML config and is read-only through the API: "
        "edit the file and reload policies",
        param="name",
    )


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _body(name: str, spec: TenantSpec, source: str) -> dict[str, Any]:
    return {"name": name, "source": source, "read_only": source == "yaml", **tenant_fields(spec)}


async def _fields(
    request: Request, state: GatewayState, model: type[M]
) -> tuple[M, dict[str, Any]]:
    """The body as ``model``, and the policy fields it sends."""
    timeout = state.config.server.header_timeout_s
    body = parse_body(model, await read_body(request, BODY_LIMIT, timeout))
    return body, body.model_dump(exclude={"name"}, exclude_unset=True)


def _validated(state: GatewayState, fields: dict[str, Any]) -> TenantSpec:
    try:
        spec = runtime_tenant(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(f"{where}: {first['msg']}", param=where or None) from None
    problems = tier_problems(state.config, spec, None)
    if problems:
        raise InvalidRequest("; ".join(problems))
    return spec


async def _runtime(state: GatewayState) -> dict[str, TenantSpec]:
    await state.keys.load_tenants()
    return state.keys.runtime_tenants


@endpoints.get("")
async def list_tenants(state: AdminDep) -> Response:
    runtime = await _runtime(state)
    rows = [_body(n, s, "yaml") for n, s in state.config.tenants.items()]
    rows += [_body(n, s, "api") for n, s in sorted(runtime.items())]
    for row in rows:
        row["stored"] = await _stored(state, row["name"])
    return _json({"object": "list", "data": rows})


async def _stored(state: GatewayState, tenant: str) -> dict[str, Any]:
    """What the tenant keeps in the shared store against its caps."""
    limits = state.config.responses
    used = await state.parts.responses.usage(tenant)
    return {
        "responses": {
            "count": used.count,
            "bytes": used.bytes,
            "max_count": limits.tenant_max_count,
            "max_bytes": limits.tenant_max_bytes,
        }
    }


async def _save(state: GatewayState, name: str, spec: TenantSpec) -> None:
    await state.keys.store.put_tenant(name, tenant_fields(spec))
    state.keys.runtime_tenants = {**state.keys.runtime_tenants, name: spec}
    state.keys.changed()


@endpoints.post("", status_code=201, openapi_extra=request_body(TenantCreate))
async def create_tenant(request: Request, state: AdminDep) -> Response:
    body, fields = await _fields(request, state, TenantCreate)
    name = body.name
    if name in state.config.tenants:
        raise Conflict(f"tenant {name!r} already exists in the YAML config", param="name")
    if name in await _runtime(state):
        raise Conflict(f"tenant {name!r} already exists; PATCH it to change it", param="name")
    spec = _validated(state, fields)
    await _save(state, name, spec)
    after = _body(name, spec, "api")
    await record(request, state, "tenant.create", name, None, after)
    return _json(after, 201)


@endpoints.patch("/{name}", openapi_extra=request_body(TenantUpdate))
async def update_tenant(request: Request, name: str, state: AdminDep) -> Response:
    if name in state.config.tenants:
        raise _read_only(name)
    old = (await _runtime(state)).get(name)
    if old is None:
        raise NotFound(f"no runtime tenant {name!r}", param="name")
    _, changes = await _fields(request, state, TenantUpdate)
    spec = _validated(state, {**tenant_fields(old), **changes})
    await _save(state, name, spec)
    before, after = _body(name, old, "api"), _body(name, spec, "api")
    await record(request, state, "tenant.update", name, before, after)
    return _json(after)


@endpoints.delete("/{name}")
async def delete_tenant(request: Request, name: str, state: AdminDep) -> Response:
    if name in state.config.tenants:
        raise _read_only(name)
    old = (await _runtime(state)).get(name)
    if old is None:
        raise NotFound(f"no runtime tenant {name!r}", param="name")
    store, now = state.keys.store, time.time()
    await store.delete_tenant(name)
    revoked = [k for k in await store.list(name) if k.revoked_at is None]
    for key in revoked:
        await store.put(key.model_copy(update={"revoked_at": now}))
    state.keys.runtime_tenants = {n: s for n, s in state.keys.runtime_tenants.items() if n != name}
    state.keys.changed()
    after = {"deleted": True, "revoked_keys": [k.id for k in revoked]}
    await record(request, state, "tenant.delete", name, _body(name, old, "api"), after)
    return _json({"name": name, **after})
