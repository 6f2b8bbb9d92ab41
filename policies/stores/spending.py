"""Which budget and rate-limit scopes a caller spends from (the stores:
policies/stores/factories.py)."""

from __future__ import annotations

from policies.schema import GatewayConfig
from policies.stores.budget import GLOBAL_SCOPE, Scope, key_scope, tenant_scope
from policies.stores.ratelimit import RateScope
from policies.tenants import Principal


def budget_scopes(config: GatewayConfig, principal: Principal) -> list[Scope]:
    """Global, tenant and key, always: uncapped scopes still count spend (and can be
    capped at run time through the admin API). YAML and API-managed keys alike carry
    their own cap on the principal."""
    return [
        Scope(GLOBAL_SCOPE, config.budgets.global_budget),
        Scope(tenant_scope(principal.tenant), principal.policy.budget),
        Scope(key_scope(principal.tenant, principal.key_id), principal.key_budget),
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
    if principal.key_rate_limit is not None:
        key = key_scope(principal.tenant, principal.key_id)
        scopes.append(RateScope(key, principal.key_rate_limit))
    return scopes
