"""API-managed keys and tenants: the records, and the store contract they live in.

A managed key is issued through the admin API: the raw key (``tg-`` + 32 random bytes,
URL-safe) is shown once and only its SHA-256 digest is kept. Every change bumps one
version counter (and, on Redis, is announced on a pub/sub channel); each replica drops
its local cache when it moves (``policies.stores.key_directory.KeyDirectory``). Runtime tenants
carry every ``TenantSpec`` field except ``keys`` and are validated by ``TenantSpec`` itself.

``MemoryKeyStore`` keeps the contract for one process; ``RedisKeyStore``
(``policies.stores.keys_redis``) shares it between replicas.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from policies.mcp_spec import McpCallLimit, ToolPattern
from policies.schema import ApiKey, BudgetSpec, GatewayConfig, RateLimitSpec, TenantSpec
from policies.tenants import hash_key

RAW_KEY_PREFIX = "tg-"
# Stands in for ``keys`` while ``TenantSpec`` validates a runtime tenant; removed after.
_PLACEHOLDER_KEY = ApiKey(id="-", sha256="0" * 64)


def new_raw_key() -> str:
    return RAW_KEY_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


class KeyScope(BaseModel):
    """What a key may do; every field can be changed later with ``PATCH``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    expires_at: float | None = None  # unix seconds; None: never
    allowed_tiers: tuple[str, ...] | None = None
    allowed_models: tuple[str, ...] | None = None
    budget: BudgetSpec | None = None
    rate_limit: RateLimitSpec | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    # MCP tools: narrows the tenant's ``mcp_tools`` (None: the tenant's), and its own limit.
    mcp_tools: tuple[ToolPattern, ...] | None = None
    mcp_rate_limit: McpCallLimit | None = None


class ManagedKey(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    tenant: str
    name: str = ""
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    last4: str
    created_at: float
    revoked_at: float | None = None
    scope: KeyScope = KeyScope()

    def active(self, now: float) -> bool:
        expires = self.scope.expires_at
        return self.revoked_at is None and (expires is None or now < expires)


def issue_key(tenant: str, name: str, scope: KeyScope) -> tuple[str, ManagedKey]:
    """A new raw key and its record (which holds only the digest)."""
    raw = new_raw_key()
    record = ManagedKey(
        id=new_key_id(),
        tenant=tenant,
        name=name,
        digest=hash_key(raw),
        last4=raw[-4:],
        created_at=time.time(),
        scope=scope,
    )
    return raw, record


def runtime_tenant(fields: Mapping[str, Any]) -> TenantSpec:
    """A tenant from its policy fields (``TenantSpec``'s, without ``keys``); raises
    ``pydantic.ValidationError`` on a bad field."""
    if "keys" in fields:
        raise ValueError("keys of a runtime tenant are issued with POST /admin/api/keys")
    spec = TenantSpec.model_validate({**fields, "keys": [_PLACEHOLDER_KEY]})
    return spec.model_copy(update={"keys": ()})


def tenant_fields(spec: TenantSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude={"keys"})


def tier_problems(config: GatewayConfig, spec: TenantSpec, scope: KeyScope | None) -> list[str]:
    """Names of tiers and models that this config does not have."""
    named = [spec.default_tier, spec.min_tier, spec.max_tier, *(spec.allowed_tiers or ())]
    if scope is not None:
        named += list(scope.allowed_tiers or ())
    problems = [f"unknown tier {t!r}" for t in named if t is not None and t not in config.tiers]
    models = {*config.models(), *config.embeddings}
    for model in scope.allowed_models or () if scope is not None else ():
        if model not in models:
            problems.append(f"unknown model {model!r}")
    return problems


class KeyStore(Protocol):
    """Where managed keys and runtime tenants live; every write bumps ``version``."""

    async def version(self) -> int: ...

    async def by_digest(self, digest: str) -> ManagedKey | None: ...

    async def get(self, key_id: str) -> ManagedKey | None: ...

    async def list(self, tenant: str | None = None) -> list[ManagedKey]: ...

    async def put(self, key: ManagedKey) -> None: ...

    async def tenants(self) -> dict[str, dict[str, Any]]: ...

    async def put_tenant(self, name: str, fields: dict[str, Any]) -> None: ...

    async def delete_tenant(self, name: str) -> bool: ...

    async def touch(self, used: Mapping[str, float]) -> None: ...

    async def last_used(self) -> dict[str, float]: ...

    async def wait_change(self, timeout_s: float) -> None: ...

    async def aclose(self) -> None: ...


class MemoryKeyStore:
    """Single-process store (no Redis); each method runs to completion on the loop."""

    def __init__(self) -> None:
        self._version = 0
        self._by_digest: dict[str, ManagedKey] = {}
        self._by_id: dict[str, str] = {}
        self._tenants: dict[str, dict[str, Any]] = {}
        self._used: dict[str, float] = {}

    async def version(self) -> int:
        return self._version

    async def by_digest(self, digest: str) -> ManagedKey | None:
        return self._by_digest.get(digest)

    async def get(self, key_id: str) -> ManagedKey | None:
        digest = self._by_id.get(key_id)
        return None if digest is None else self._by_digest.get(digest)

    async def list(self, tenant: str | None = None) -> list[ManagedKey]:
        keys = self._by_digest.values()
        return sorted(
            (k for k in keys if tenant is None or k.tenant == tenant), key=lambda k: k.created_at
        )

    async def put(self, key: ManagedKey) -> None:
        self._by_digest[key.digest] = key
        self._by_id[key.id] = key.digest
        self._version += 1

    async def tenants(self) -> dict[str, dict[str, Any]]:
        return dict(self._tenants)

    async def put_tenant(self, name: str, fields: dict[str, Any]) -> None:
        self._tenants[name] = fields
        self._version += 1

    async def delete_tenant(self, name: str) -> bool:
        found = self._tenants.pop(name, None) is not None
        self._version += 1
        return found

    async def touch(self, used: Mapping[str, float]) -> None:
        for key_id, ts in used.items():
            self._used[key_id] = max(ts, self._used.get(key_id, 0.0))

    async def last_used(self) -> dict[str, float]:
        return dict(self._used)

    async def wait_change(self, timeout_s: float) -> None:
        # One process: the admin route drops the directory's cache itself.
        await asyncio.sleep(timeout_s)

    async def aclose(self) -> None:
        return None
