"""Admin API request models: budgets, API-managed keys and runtime tenants."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.escalation_spec import EscalationSpec
from policies.guardrails_spec import GuardrailsSpec
from policies.mcp_spec import McpCallLimit, ToolPattern
from policies.schema import MAX_LIMIT_USD, BudgetSpec, CachePolicy, RateLimitSpec


class BudgetUpdate(BaseModel):
    """``PUT /admin/api/budgets``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scope: Literal["global", "tenant", "key"] = "tenant"
    tenant: str | None = None
    key_id: str | None = None
    limit_usd: float | None = Field(None, ge=0, le=MAX_LIMIT_USD)  # null: uncapped
    window: Literal["daily", "monthly", "total"] = "daily"
    reset: bool = False

    @model_validator(mode="after")
    def _names(self) -> BudgetUpdate:
        if self.scope != "global" and not self.tenant:
            raise ValueError("tenant is required unless scope is global")
        if self.scope == "key" and not self.key_id:
            raise ValueError("key_id is required when scope is key")
        return self


class KeyScopeFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("", max_length=200)
    expires_at: datetime | None = None  # ISO 8601 (UTC unless it says) or unix seconds
    allowed_tiers: list[str] | None = None
    allowed_models: list[str] | None = None
    budget: BudgetSpec | None = None
    rate_limit: RateLimitSpec | None = None
    metadata: dict[str, str] = Field(default_factory=dict, max_length=32)
    # MCP tools: within the tenant's ``mcp_tools`` (null: the tenant's), and their limit.
    mcp_tools: list[ToolPattern] | None = Field(None, max_length=256)
    mcp_rate_limit: McpCallLimit | None = None


class KeyCreate(KeyScopeFields):
    """``POST /admin/api/keys``: the answer carries the raw key, once."""

    tenant: str = Field(min_length=1, max_length=128)


class KeyUpdate(KeyScopeFields):
    """``PATCH /admin/api/keys/{key_id}``: only the fields sent change; ``null`` clears
    one (no expiry, no cap, any tier)."""


class TenantFields(BaseModel):
    """A runtime tenant's policy: ``policies.schema.TenantSpec`` without ``keys`` (issued
    with ``POST /admin/api/keys``). The tenant is validated as a ``TenantSpec`` too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_tier: str = "small"
    allowed_tiers: list[str] | None = None
    budget: BudgetSpec | None = None
    on_budget_exceeded: Literal["reject", "downgrade"] = "reject"
    rate_limit: RateLimitSpec | None = None
    budget_fail_open: bool = False
    rate_limit_fail_open: bool = False
    cache: CachePolicy = CachePolicy()
    min_tier: str | None = None
    max_tier: str | None = None
    allow_tier_header: bool = False
    compat: Literal["lenient", "strict"] = "lenient"
    mcp_tools: tuple[ToolPattern, ...] = Field((), max_length=256)
    mcp_rate_limit: McpCallLimit | None = None
    mcp_log_arguments: bool = False
    escalation: EscalationSpec | None = None
    guardrails: GuardrailsSpec | None = None


class TenantCreate(TenantFields):
    """``POST /admin/api/tenants``."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")


class TenantUpdate(TenantFields):
    """``PATCH /admin/api/tenants/{name}``: only the fields sent change (no renaming)."""
