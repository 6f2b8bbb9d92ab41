"""FastAPI dependencies: each route takes exactly one, which authenticates the caller and
hands over what the route may use: the serving core (the request's config snapshot and
the collaborators). The tenant one, ``tenant_call``, is with the tenant-key check in
``gateway.edge.http``; the admin routes' own (the whole gateway state) are in
``gateway.admin.deps``.

    async def list_models(call: TenantDep) -> Response: ...   # call.core, call.principal
    async def readyz(core: CoreDep) -> Response: ...
    async def metrics(core: ScraperDep) -> Response: ...

One dependency per route, not a tree of them: FastAPI resolves every node of the tree
on every request (about 10-15 us each), and this is on every request's path. Each is
``async def`` (a plain ``def`` would run in a worker thread). The security schemes they
check are declared in ``/openapi.json`` (``gateway.edge.openapi.security_scheme``).
"""

from __future__ import annotations

import hmac
import os
from typing import Annotated

from fastapi import Depends, Request

from gateway.core.serving_core import ServingCore
from gateway.edge.http import TenantCall, bearer_key, tenant_call
from gateway.edge.openapi import security_scheme
from gateway.errors import InvalidApiKey
from gateway.state import GatewayState
from policies.service_spec import MetricsConfig
from policies.tenants import hash_key


async def serving_core(request: Request) -> ServingCore:
    state: GatewayState = request.app.state.tiergate
    return state.core


def metrics_digest(spec: MetricsConfig) -> str | None:
    """The scraper token's digest; None: ``/metrics`` is open."""
    if spec.token_sha256 is not None:
        return spec.token_sha256
    if not spec.token_from_env:
        return None
    raw = os.environ.get(spec.token_from_env, "")
    # Configured but unset: refuse everyone rather than fall open.
    return hash_key(raw) if raw else "unset"


@security_scheme("metricsToken")
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
ScraperDep = Annotated[ServingCore, Depends(scraper)]
