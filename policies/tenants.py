"""API keys and the tenants they belong to; keys are held only as SHA-256 digests."""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from dataclasses import dataclass

from policies.mcp_spec import McpCallLimit
from policies.schema import BudgetSpec, GatewayConfig, RateLimitSpec, TenantSpec

log = logging.getLogger(__name__)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant, its policy (narrowed by the key's allowed tiers), the
    key used and what that key itself may spend and use."""

    tenant: str
    key_id: str
    policy: TenantSpec
    key_budget: BudgetSpec | None = None
    key_rate_limit: RateLimitSpec | None = None
    allowed_models: frozenset[str] | None = None  # None: any model the policy allows
    # The key's own MCP allowlist, within the tenant's (None: the tenant's), and limit.
    mcp_tools: tuple[str, ...] | None = None
    mcp_rate_limit: McpCallLimit | None = None

    def model_refusal(self, model: str, config: GatewayConfig) -> str | None:
        """Why this key may not name ``model`` explicitly (None: it may)."""
        if self.allowed_models is None or model == "auto" or model in config.tiers:
            return None
        if model in self.allowed_models:
            return None
        return (
            f"model {model!r} is not allowed for this API key "
            f"(allowed: {', '.join(sorted(self.allowed_models)) or 'none'})"
        )


class KeyRing:
    def __init__(self, by_digest: dict[str, Principal]) -> None:
        self._by_digest = by_digest

    @classmethod
    def from_config(cls, config: GatewayConfig) -> KeyRing:
        """``from_env`` keys are read now; an unset variable gets a random key, shown once."""
        by_digest: dict[str, Principal] = {}
        for tenant_name, tenant in config.tenants.items():
            for key in tenant.keys:
                digest = key.sha256
                if key.from_env is not None:
                    raw = os.environ.get(key.from_env)
                    if not raw:
                        raw = "tg-" + secrets.token_urlsafe(24)
                        os.environ[key.from_env] = raw
                        print(
                            f"tiergate: {key.from_env} is unset; key for tenant "
                            f"{tenant_name!r} ({key.id}) is {raw}",
                            flush=True,
                        )
                    digest = hash_key(raw)
                assert digest is not None
                if digest in by_digest:
                    # Two keys with one digest: which tenant pays would depend on file order.
                    first = by_digest[digest]
                    raise ValueError(
                        f"tenant {tenant_name!r} key {key.id!r} is the same key as tenant "
                        f"{first.tenant!r} key {first.key_id!r}"
                    )
                by_digest[digest] = Principal(
                    tenant_name, key.id, tenant, key.budget, key.rate_limit
                )
        return cls(by_digest)

    def authenticate(self, raw_key: str) -> Principal | None:
        return self.by_digest(hash_key(raw_key))

    def by_digest(self, digest: str) -> Principal | None:
        # Lookup by digest: timing reveals at most a prefix of a hash, never of a key.
        return self._by_digest.get(digest)
