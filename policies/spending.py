"""Which budget and rate-limit scopes a caller spends from (the stores: policies/stores.py)."""

from __future__ import annotations

from policies.budget import GLOBAL_SCOPE, Scope, key_scope, tenant_scope
from policies.ratelimit import RateScope
from policies.schema import ApiKey, GatewayConfig
from policies.tenants import Principal


def _key_spec(principal: Principal) -> ApiKey | None:
    return next((k for k in principal.policy.keys if k.id == principal.key_id), None)


def budget_scopes(config: GatewayConfig, principal: Principal) -> list[Scope]:
    """Global, tenant and key, always: uncapped scopes still count spend (and can be
    capped at run time through the admin API)."""
    key = _key_spec(principal)
    return [
        Scope(GLOBAL_SCOPE, config.budgets.global_budget),
        Scope(tenant_scope(principal.tenant), principal.policy.budget),
        Scope(key_scope(principal.tenant, principal.key_id), key.budget if key else None),
    ]


def tenant_scopes(config: GatewayConfig, tenant: str) -> list[Scope]:
    """A tenant's own scope and one per configured key (for the admin API)."""
    policy = config.tenants[tenant]
    return [
        Scope(tenant_scope(tenant), policy.budget),
        *(Scope(key_scope(tenant, k.id), k.budget) for k in policy.keys),
    ]


def rate_scopes(principal: Principal) -> list[RateScope]:
    scopes: list[RateScope] = []
    if principal.policy.rate_limit is not None:
        scopes.append(RateScope(tenant_scope(principal.tenant), principal.policy.rate_limit))
    key = _key_spec(principal)
    if key is not None and key.rate_limit is not None:
        scopes.append(RateScope(key_scope(principal.tenant, principal.key_id), key.rate_limit))
    return scopes
