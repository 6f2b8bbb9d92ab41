"""Budget limits per tenant, read tolerantly from the tenants' config.

The budget schema belongs to the budgets feature; this reads whatever it declares
under a tenant's ``budget`` or ``budgets`` — ``{limit_usd: 5, window: daily}``,
``{daily_usd: 5, monthly_usd: 100}``, or a list of those — plus a deployment-wide
``budgets.global_budget`` (shown as tenant ``*``), and shows spend only for a tenant
without one. Spend used is the ledger's, for the current UTC day or month; windows the
ledger cannot cover cheaply (``total``) are not shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policies.schema import GatewayConfig

WINDOWS = {"day": "day", "daily": "day", "month": "month", "monthly": "month"}
LIMIT_FIELDS = ("limit_usd", "usd", "limit", "amount_usd", "amount")


@dataclass(frozen=True, slots=True)
class BudgetLimit:
    tenant: str
    window: str  # day | month
    limit_usd: float


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _from_mapping(tenant: str, raw: Mapping[str, Any]) -> Iterable[BudgetLimit]:
    window = WINDOWS.get(str(raw.get("window") or raw.get("period") or ""))
    if window is not None:
        for name in LIMIT_FIELDS:
            limit = _number(raw.get(name))
            if limit is not None:
                yield BudgetLimit(tenant, window, limit)
                return
    for key, value in raw.items():
        key_window = WINDOWS.get(str(key).removesuffix("_usd"))
        limit = _number(value)
        if key_window is not None and limit is not None:
            yield BudgetLimit(tenant, key_window, limit)


def limits_of(tenant: str, raw: Any) -> list[BudgetLimit]:
    """The limits one tenant's ``budget``/``budgets`` value declares (none if unreadable)."""
    if isinstance(raw, Mapping):
        return list(_from_mapping(tenant, raw))
    if isinstance(raw, list | tuple):
        return [
            limit
            for item in raw
            if isinstance(item, Mapping)
            for limit in _from_mapping(tenant, item)
        ]
    return []


ALL_TENANTS = "*"


def budget_limits(config: GatewayConfig) -> list[BudgetLimit]:
    found: list[BudgetLimit] = []
    for name, tenant in config.tenants.items():
        raw = tenant.model_dump()
        for key in ("budget", "budgets"):
            found.extend(limits_of(name, raw.get(key)))
    deployment = config.model_dump().get("budgets")
    if isinstance(deployment, Mapping):
        found.extend(limits_of(ALL_TENANTS, deployment.get("global_budget")))
    return found
