"""The admin key: a separate secret from tenant keys; tenant keys never open admin routes."""

from __future__ import annotations

import hmac
import os

from starlette.requests import Request

from gateway.errors import InvalidApiKey, PermissionDenied
from gateway.state import GatewayState
from policies.tenants import hash_key


def admin_digest(state: GatewayState) -> str | None:
    admin = state.config.admin
    if admin.key_sha256 is not None:
        return admin.key_sha256
    raw = os.environ.get(admin.key_from_env or "") if admin.key_from_env else None
    return hash_key(raw) if raw else None


def is_admin_key(state: GatewayState, raw_key: str) -> bool:
    expected = admin_digest(state)
    return expected is not None and hmac.compare_digest(expected, hash_key(raw_key))


def require_admin(request: Request, state: GatewayState) -> None:
    """Bearer admin key (API clients). The dashboard's session cookie is checked elsewhere."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise InvalidApiKey("admin routes need 'Authorization: Bearer ADMIN_KEY'")
    if not is_admin_key(state, key.strip()):
        raise PermissionDenied("this key may not use admin routes")
