"""FastAPI dependencies: each route takes exactly one, which authenticates the caller and
hands over what the route may use: the serving core (the request's config snapshot and
the collaborators), or, for the admin routes only, the whole gateway state. The tenant
one, ``tenant_call``, is with the tenant-key check in ``gateway.edge.http``.

    async def list_models(call: TenantDep) -> Response: ...   # call.core, call.principal
    async def list_budgets(state: AdminDep) -> Response: ...
    async def readyz(core: CoreDep) -> Response: ...
    async def metrics(core: ScraperDep) -> Response: ...

One dependency per route, not a tree of them: FastAPI resolves every node of the tree
on every request (about 10-15 us each), and this is on every request's path. Each is
``async def`` (a plain ``def`` would run in a worker thread). The security schemes they
check are declared in ``/openapi.json`` by ``gateway.edge.openapi``.
"""

from __future__ import annotations

import hmac
import os
from typing import Annotated

from fastapi import Depends, Request

from gateway.admin.access import require_admin_access
from gateway.admin.auth import require_admin
from gateway.core.serving import ServingCore
from gateway.edge.http import TenantCall, bearer_key, tenant_call
from gateway.errors import InvalidApiKey
from gateway.state import GatewayState
from policies.service_spec import MetricsConfig
from policies.tenants import hash_key


async def serving_core(request: Request) -> ServingCore:
    state: GatewayState = request.app.state.tiergate
    return state.core


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


def metrics_digest(spec: MetricsConfig) -> str | None:
    """The scraper token's digest; None: ``/metrics`` is open."""
    if spec.token_sha256 is not None:
        return spec.token_sha256
    if not spec.token_from_env:
        return None
    raw = os.environ.get(spec.token_from_env, "")
    # Configured but unset: refuse everyone rather than fall open.
    return hash_key(raw) if raw else "unset"


async def scraper(request: Request) -> ServingCore:
    """The metrics token as a Bearer token, when ``metrics.token_*`` configures one."""
    state: GatewayState = request.app.state.tiergate
    core = state.core
    expected = metrics_digest(core.config.metrics)
    if expected is not None:
        given = hash_key((bearer_key(request) or "").strip())
        if not hmac.compare_digest(expected, given):
            raise InvalidApiKey("/metrics needs 'Authorization: Bearer METRICS_TOKEN'")
    return core


CoreDep = Annotated[ServingCore, Depends(serving_core)]
TenantDep = Annotated[TenantCall, Depends(tenant_call)]
AdminDep = Annotated[GatewayState, Depends(admin_access)]
AdminKeyDep = Annotated[GatewayState, Depends(admin_key)]
ScraperDep = Annotated[ServingCore, Depends(scraper)]

# The OpenAPI security scheme each dependency checks (gateway.edge.openapi declares them).
SECURITY = {
    tenant_call: "tenantKey",
    admin_access: "adminKey",
    admin_key: "adminKey",
    scraper: "metricsToken",
}
