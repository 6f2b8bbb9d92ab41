"""Who may open the admin side: the admin key as a Bearer token, or a dashboard session.

A tenant key is refused (403) wherever it is shown; no tenant key opens a session.
"""

from __future__ import annotations

from starlette.requests import Request

from gateway.admin.auth import admin_digest, require_admin
from gateway.admin.session import COOKIE, DashboardSessions
from gateway.errors import InvalidApiKey
from gateway.state import GatewayState


def sessions(state: GatewayState) -> DashboardSessions:
    return DashboardSessions(state.parts.store, state.config.admin.session_ttl_s)


async def has_session(request: Request, state: GatewayState) -> bool:
    token = request.cookies.get(COOKIE, "")
    if not token:
        return False
    return await sessions(state).valid(token, admin_digest(state))


async def require_admin_access(request: Request, state: GatewayState) -> None:
    """Bearer admin key, else a valid session cookie; a Bearer tenant key is refused."""
    if "authorization" in request.headers:
        require_admin(request, state)
        return
    if not await has_session(request, state):
        raise InvalidApiKey("log in at /admin, or send 'Authorization: Bearer ADMIN_KEY'")
