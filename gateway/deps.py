"""FastAPI dependencies every route takes: the gateway state, the tenant, the admin.

Routes declare what they need with these aliases and FastAPI resolves them (and shows
the security schemes in ``/openapi.json``)::

    async def list_models(state: StateDep, principal: TenantDep) -> Response: ...

Each dependency is ``async def``: a plain ``def`` would run in a worker thread.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gateway.admin.access import require_admin_access
from gateway.admin_auth import require_admin
from gateway.http import authenticate
from gateway.state import GatewayState
from policies.tenants import Principal

_tenant_key = HTTPBearer(auto_error=False, scheme_name="tenantKey", description="a tenant API key")
_admin_key = HTTPBearer(
    auto_error=False,
    scheme_name="adminKey",
    description="the admin key (or the dashboard's session cookie)",
)
Credentials = HTTPAuthorizationCredentials | None


async def gateway_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.tiergate
    return state


StateDep = Annotated[GatewayState, Depends(gateway_state)]


async def tenant(
    state: StateDep, credentials: Annotated[Credentials, Depends(_tenant_key)]
) -> Principal:
    return authenticate(state, None if credentials is None else credentials.credentials)


async def admin_access(
    request: Request,
    state: StateDep,
    credentials: Annotated[Credentials, Depends(_admin_key)],
) -> None:
    await require_admin_access(request, state)


async def admin_key(
    request: Request,
    state: StateDep,
    credentials: Annotated[Credentials, Depends(_admin_key)],
) -> None:
    require_admin(request, state)


TenantDep = Annotated[Principal, Depends(tenant)]
AdminDep = Annotated[None, Depends(admin_access)]  # admin key or dashboard session
AdminKeyDep = Annotated[None, Depends(admin_key)]  # admin key only (scripts)
