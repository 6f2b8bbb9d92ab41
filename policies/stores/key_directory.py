"""Resolving an API key on the hot path: YAML keys first, then API-managed ones.

YAML keys are a dict lookup. A managed key is looked up in a local cache; a miss costs
one store round trip (``HGET`` by digest). Every admin write bumps the store's version
counter and announces itself (Redis pub/sub); ``run()`` refreshes on each announcement,
and polls the version every ``poll_s`` besides, so a key revoked on one replica stops
working on every other at once, or within about ``poll_s`` if a message is lost. A replica
that cannot reach the store trusts its cache for ``max_stale_s`` at most, then asks the
store on every request (and refuses with ``StoreUnavailable`` if it cannot).
Expiry is checked on every request against the record's ``expires_at``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from policies.schema import GatewayConfig, TenantSpec
from policies.stores.keys import KeyStore, ManagedKey, runtime_tenant
from policies.stores.store import StoreUnavailable
from policies.tenants import KeyRing, Principal, hash_key

log = logging.getLogger(__name__)

POLL_S = 0.2
MAX_STALE_S = 2.0
# Digests the store refused (unknown, revoked, expired) are remembered until the next
# change, so a flood of bad keys does not become a flood of Redis reads. A raw key is
# unguessable before it is issued, so remembering an unknown digest never hides a new key.
MAX_REFUSED = 65_536


def scoped_policy(config: GatewayConfig, policy: TenantSpec, key: ManagedKey) -> TenantSpec:
    """The tenant's policy narrowed to the tiers this key may use: its ``allowed_tiers``,
    and (for ``allowed_models``) the tiers whose every model is allowed."""
    allowed = set(policy.allowed_tiers) if policy.allowed_tiers is not None else set(config.tiers)
    scope = key.scope
    if scope.allowed_tiers is not None:
        allowed &= set(scope.allowed_tiers)
    if scope.allowed_models is not None:
        models = set(scope.allowed_models)
        allowed &= {
            name
            for name, tier in config.tiers.items()
            if all(config.engines[e].model in models for e in tier.engines)
        }
    if policy.allowed_tiers is None and allowed == set(config.tiers):
        return policy
    ordered = tuple(t for t in config.tiers if t in allowed)
    return policy.model_copy(update={"allowed_tiers": ordered})


class KeyDirectory:
    def __init__(
        self,
        store: KeyStore,
        config: GatewayConfig,
        keyring: KeyRing,
        *,
        poll_s: float = POLL_S,
        max_stale_s: float = MAX_STALE_S,
    ) -> None:
        self.store = store
        self.config = config
        self.keyring = keyring
        self.poll_s = poll_s
        self.max_stale_s = max_stale_s
        self.runtime_tenants: dict[str, TenantSpec] = {}
        self._cache: dict[str, tuple[Principal, float]] = {}  # digest -> (principal, expiry)
        self._refused: set[str] = set()
        self._generation = 0  # bumped by every clear: a lookup begun before one is not cached
        self._version = -1
        self._checked = -math.inf  # monotonic time of the last successful version poll
        self._used: dict[str, float] = {}
        self._down_logged = False

    def reconfigure(self, config: GatewayConfig, keyring: KeyRing) -> None:
        """After a policy reload: new YAML keys and tenants; cached principals rebuilt."""
        self.config, self.keyring = config, keyring
        self.changed()

    def changed(self) -> None:
        """Drop every cached principal (this replica wrote, or the version moved)."""
        self._cache.clear()
        self._refused.clear()
        self._generation += 1

    def tenant(self, name: str) -> TenantSpec | None:
        return self.config.tenants.get(name) or self.runtime_tenants.get(name)

    def tenant_names(self) -> list[str]:
        """YAML tenants in file order, then runtime ones by name."""
        runtime = (n for n in sorted(self.runtime_tenants) if n not in self.config.tenants)
        return [*self.config.tenants, *runtime]

    async def authenticate(self, raw_key: str) -> Principal | None:
        digest = hash_key(raw_key)
        principal = self.keyring.by_digest(digest)
        if principal is not None:
            return principal
        if time.monotonic() - self._checked > self.max_stale_s:
            self.changed()  # polling has failed for too long: nothing cached is trusted
        cached = self._cache.get(digest)
        now = time.time()
        if cached is not None:
            principal, expires = cached
            if now >= expires:
                return None
            self._used[principal.key_id] = now
            return principal
        if digest in self._refused:
            return None
        generation = self._generation
        record = await self.store.by_digest(digest)  # the one round trip, on a miss only
        if record is None or not record.active(now):
            if generation == self._generation:
                if len(self._refused) >= MAX_REFUSED:
                    self._refused.clear()
                self._refused.add(digest)
            return None
        principal = await self._principal(record)
        if principal is None:
            return None
        if generation == self._generation:
            expiry = record.scope.expires_at
            self._cache[digest] = (principal, math.inf if expiry is None else expiry)
        self._used[record.id] = now
        return principal

    async def _principal(self, record: ManagedKey) -> Principal | None:
        policy = self.tenant(record.tenant)
        if policy is None:  # a tenant created a moment ago on another replica
            await self.load_tenants()
            policy = self.tenant(record.tenant)
            if policy is None:
                return None
        scope = record.scope
        models = None if scope.allowed_models is None else frozenset(scope.allowed_models)
        return Principal(
            tenant=record.tenant,
            key_id=record.id,
            policy=scoped_policy(self.config, policy, record),
            key_budget=scope.budget,
            key_rate_limit=scope.rate_limit,
            allowed_models=models,
            mcp_tools=scope.mcp_tools,
            mcp_rate_limit=scope.mcp_rate_limit,
        )

    async def load_tenants(self) -> None:
        tenants: dict[str, TenantSpec] = {}
        for name, fields in (await self.store.tenants()).items():
            try:
                tenants[name] = runtime_tenant(fields)
            except ValueError as exc:  # pydantic.ValidationError is a ValueError
                log.error("runtime tenant %r is invalid and ignored: %s", name, exc)
        self.runtime_tenants = tenants

    async def refresh(self) -> None:
        """One poll: drop the cache if the version moved; write last-use times."""
        version = await self.store.version()
        if version != self._version:
            await self.load_tenants()
            self.changed()
            self._version = version
        self._checked = time.monotonic()
        used, self._used = self._used, {}
        try:
            await self.store.touch(used)
        except StoreUnavailable:
            for key_id, ts in used.items():
                self._used.setdefault(key_id, ts)
            raise

    async def run(self) -> None:
        """Poll until cancelled (started by the lifespan)."""
        try:
            while True:
                try:
                    await self.refresh()
                    self._down_logged = False
                    await self.store.wait_change(self.poll_s)
                except StoreUnavailable as exc:
                    if not self._down_logged:
                        log.warning("key store unreachable, managed keys age out of cache: %s", exc)
                        self._down_logged = True
                    await asyncio.sleep(self.poll_s)
        finally:
            await self.store.aclose()
