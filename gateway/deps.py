"""FastAPI dependencies: each route takes exactly one, which authenticates the caller and
hands over the gateway state.

    async def list_models(call: TenantDep) -> Response: ...   # call.state, call.principal
    async def list_budgets(state: AdminDep) -> Response: ...
    async def readyz(state: StateDep) -> Response: ...
    async def metrics(state: ScraperDep) -> Response: ...

One dependency per route, not a tree of them: FastAPI resolves every node of the tree
on every request (about 10-15 us each), and this is on every request's path. Each is
``async def`` (a plain ``def`` would run in a worker thread). The security schemes they
check are declared in ``/openapi.json`` by ``gateway.openapi``.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from gateway.admin.access import require_admin_access
from gateway.admin_auth import require_admin
from gateway.errors import InvalidApiKey
from gateway.http import authenticate, bearer_key
from gateway.state import GatewayState
from policies.tenants import Principal, hash_key


@dataclass(frozen=True, slots=True)
class TenantCall:
    state: GatewayState
    principal: Principal


async def gateway_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.tiergate
    return state


async def tenant_call(request: Request) -> TenantCall:
    """The tenant behind the Bearer key (``state.keys`` decides)."""
    state: GatewayState = request.app.state.tiergate
    return TenantCall(state, await authenticate(state, bearer_key(request)))


async def admin_access(request: Request) -> GatewayState:
    """The admin key as a Bearer token, or a dashboard session."""
    state: GatewayState = request.app.state.tiergate
    await require_admin_access(request, state)
    return state


async def admin_key(request: Request) -> GatewayState:
    """The admin key as a Bearer token only (scripts)."""
    state: GatewayState = request.app.state.tiergate
    require_admin(request, state)
    return state


def metrics_digest(state: GatewayState) -> str | None:
    """The scraper token's digest; None: ``/metrics`` is open."""
    spec = state.config.metrics
    if spec.token_sha256 is not None:
        return spec.token_sha256
    if not spec.token_from_env:
        return None
    raw = os.environ.get(spec.token_from_env, "")
    # Configured but unset: refuse everyone rather than fall open.
    return hash_key(raw) if raw else "unset"


async def scraper(request: Request) -> GatewayState:
    """The metrics token as a Bearer token, when ``metrics.token_*`` configures one."""
    state: GatewayState = request.app.state.tiergate
    expected = metrics_digest(state)
    if expected is not None:
        given = hash_key((bearer_key(request) or "").strip())
        if not hmac.compare_digest(expected, given):
            raise InvalidApiKey("/metrics needs 'Authorization: Bearer METRICS_TOKEN'")
    return state


StateDep = Annotated[GatewayState, Depends(gateway_state)]
TenantDep = Annotated[TenantCall, Depends(tenant_call)]
AdminDep = Annotated[GatewayState, Depends(admin_access)]
AdminKeyDep = Annotated[GatewayState, Depends(admin_key)]
ScraperDep = Annotated[GatewayState, Depends(scraper)]

# The OpenAPI security scheme each dependency checks (gateway.openapi declares them).
SECURITY = {
    tenant_call: "tenantKey",
    admin_access: "adminKey",
    admin_key: "adminKey",
    scraper: "metricsToken",
}
