"""Dashboard sessions: an opaque random token in an HttpOnly, SameSite=Strict cookie.

The server keeps only the token's digest, in the store (shared by every replica on
Redis; key ``<redis_prefix>:{admin}:session:<sha256>``, one key per session, so any
cluster slot will do), with the session's lifetime as its TTL. The stored value is the admin key's
digest at login, so rotating the admin key ends every session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from policies.stores.store import Store

COOKIE = "tiergate_admin"
COOKIE_PATH = "/admin"


class DashboardSessions:
    def __init__(self, store: Store, ttl_s: float) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.prefix = store.keys("admin") + ":session:"

    def _key(self, token: str) -> str:
        return self.prefix + hashlib.sha256(token.encode()).hexdigest()

    async def create(self, admin_digest: str) -> str:
        token = secrets.token_urlsafe(32)
        await self.store.set(self._key(token), admin_digest.encode(), self.ttl_s)
        return token

    async def valid(self, token: str, admin_digest: str | None) -> bool:
        if not token or len(token) > 128 or admin_digest is None:
            return False
        stored = await self.store.get(self._key(token))
        return stored is not None and hmac.compare_digest(stored, admin_digest.encode())

    async def revoke(self, token: str) -> None:
        if token and len(token) <= 128:
            await self.store.delete(self._key(token))
