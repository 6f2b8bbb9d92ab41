"""The admin key: a separate secret from tenant keys; tenant keys never open admin routes.

Every wrong admin-key guess, by the login form or as a Bearer token, counts against
the client's address and against all clients (``admin.failures_per_minute*``); past
either limit the answer is 429 until the minute ends, whatever the key.
"""

from __future__ import annotations

import hmac
import math
import os

from starlette.requests import Request

from gateway.errors import InvalidApiKey, PermissionDenied, RateLimited
from gateway.state import GatewayState
from policies.schema import GatewayConfig
from policies.tenants import hash_key


def admin_digest(state: GatewayState) -> str | None:
    admin = state.config.admin
    if admin.key_sha256 is not None:
        return admin.key_sha256
    raw = os.environ.get(admin.key_from_env or "") if admin.key_from_env else None
    return hash_key(raw) if raw else None


def weak_admin_key(config: GatewayConfig) -> str | None:
    """Why the configured raw admin key may not be used, or None (checked at startup)."""
    admin = config.admin
    if admin.key_sha256 is not None or not admin.key_from_env:
        return None
    raw = os.environ.get(admin.key_from_env, "")
    if raw and len(raw) < admin.min_key_length:
        return (
            f"the admin key in ${admin.key_from_env} has {len(raw)} characters; "
            f"at least {admin.min_key_length} are required (admin.min_key_length)"
        )
    return None


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def check_admin_guess(request: Request, state: GatewayState, raw_key: str) -> bool:
    """Whether ``raw_key`` is the admin key; refused with 429 while the client is throttled."""
    client = client_address(request)
    wait = state.admin_guesses.retry_after(client)
    if wait is not None:
        raise RateLimited(
            "too many wrong admin keys: try again later",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )
    expected = admin_digest(state)
    if expected is not None and hmac.compare_digest(expected, hash_key(raw_key)):
        return True
    state.admin_guesses.failed(client)
    return False


def require_admin(request: Request, state: GatewayState) -> None:
    """Bearer admin key (API clients). The dashboard's session cookie is checked elsewhere."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise InvalidApiKey("admin routes need 'Authorization: Bearer ADMIN_KEY'")
    if not check_admin_guess(request, state, key.strip()):
        raise PermissionDenied("this key may not use admin routes")
