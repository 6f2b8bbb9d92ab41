"""The admin routes' one dependency each: the admin key (or a dashboard session), which
hands over the whole gateway state; only the admin side takes it."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.admin.access import require_admin_access
from gateway.admin.auth import require_admin
from gateway.edge.openapi import security_scheme
from gateway.state import GatewayState


@security_scheme("adminKey")
async def admin_access(request: Request) -> GatewayState:
    """The admin key as a Bearer token, or a dashboard session."""
    state: GatewayState = request.app.state.tiergate
    await require_admin_access(request, state)
    return state


@security_scheme("adminKey")
async def admin_key(request: Request) -> GatewayState:
    """The admin key as a Bearer token only (scripts)."""
    state: GatewayState = request.app.state.tiergate
    require_admin(request, state)
    return state


AdminDep = Annotated[GatewayState, Depends(admin_access)]
AdminKeyDep = Annotated[GatewayState, Depends(admin_key)]
