"""What the dashboard shows, computed from the ledger: pure functions over aggregates and events.

Numbers are rounded only by the browser; every series here is aligned on ``days``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from gateway.admin.limits import ALL_TENANTS, BudgetLimit
from policies.stores.latency_buckets import quantile
from policies.stores.ledger import DayAggregate, SpendEvent

TOP_N = 10


def _named(values: dict[str, float], prefix: str) -> dict[str, float]:
    return {k.removeprefix(prefix): v for k, v in values.items() if k.startswith(prefix)}


def overview(
    aggregates: Sequence[DayAggregate],
    days: Sequence[str],
    tenants: Sequence[str],
    tiers: Sequence[str],
) -> dict[str, Any]:
    """Spend per tenant per day, requests per tier per day, savings, cache and the top lists."""
    index = {day: i for i, day in enumerate(days)}
    spend = {tenant: [0.0] * len(days) for tenant in tenants}
    by_tier = {tier: [0.0] * len(days) for tier in tiers}
    totals: dict[str, float] = defaultdict(float)
    tier_requests: dict[str, float] = defaultdict(float)
    tier_cost: dict[str, float] = defaultdict(float)
    tenant_rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    models: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for agg in aggregates:
        i = index[agg.day]
        spend.setdefault(agg.tenant, [0.0] * len(days))[i] += agg.get("cost_usd")
        for tier, count in _named(agg.values, "tier_requests:").items():
            by_tier.setdefault(tier, [0.0] * len(days))[i] += count
            tier_requests[tier] += count
        for tier, cost in _named(agg.values, "tier_cost:").items():
            tier_cost[tier] += cost
        for model, count in _named(agg.values, "model_requests:").items():
            models[model]["requests"] += count
        for model, cost in _named(agg.values, "model_cost:").items():
            models[model]["cost_usd"] += cost
        row = tenant_rows[agg.tenant]
        for name in (
            "requests",
            "cost_usd",
            "saved_routing_usd",
            "saved_cache_usd",
            "saved_batch_usd",
            "denied_budget",
            "denied_rate_limit",
        ):
            row[name] += agg.get(name)
        for name, value in agg.values.items():
            if ":" not in name:
                totals[name] += value
    cost, routing, cache, batch = (
        totals["cost_usd"],
        totals["saved_routing_usd"],
        totals["saved_cache_usd"],
        totals["saved_batch_usd"],
    )
    requests = totals["requests"]
    hits = totals["cache_exact"] + totals["cache_semantic"]
    judged = totals["escalation_judged"]
    return {
        "days": list(days),
        "spend": spend,
        "requests_by_tier": by_tier,
        "totals": {
            "requests": requests,
            "cost_usd": cost,
            "saved_routing_usd": routing,
            "saved_cache_usd": cache,
            "saved_batch_usd": batch,  # batch lines: their interactive price minus their cost
            "batch_requests": totals["batch_requests"],
            "batch_cost_usd": totals["batch_cost_usd"],
            "baseline_usd": cost + routing + cache + batch,
            "denied_budget": totals["denied_budget"],
            "denied_rate_limit": totals["denied_rate_limit"],
        },
        # routing.escalation: cheap answers judged, kept, re-asked one tier up, what the
        # re-asked cheap attempts cost (in cost_usd too)
        "escalation": {
            "judged": judged,
            "kept": totals["escalation_kept"],
            "escalated": totals["escalation_escalated"],
            "rate": totals["escalation_escalated"] / judged if judged else 0.0,
            "added_usd": totals["escalation_added_usd"],
        },
        "tier_mix": {tier: tier_requests.get(tier, 0.0) for tier in by_tier},
        "tier_cost": {tier: tier_cost.get(tier, 0.0) for tier in by_tier},
        "cache": {
            "exact": totals["cache_exact"],
            "semantic": totals["cache_semantic"],
            "miss": totals["cache_miss"],
            "bypass": totals["cache_bypass"],
            "hit_rate": hits / requests if requests else 0.0,
        },
        "top_tenants": [
            {"tenant": t, **row}
            for t, row in sorted(
                tenant_rows.items(), key=lambda item: (-item[1]["cost_usd"], item[0])
            )
        ][:TOP_N],
        "top_models": [
            {"model": m, "requests": r["requests"], "cost_usd": r["cost_usd"]}
            for m, r in sorted(models.items(), key=lambda item: (-item[1]["requests"], item[0]))
        ][:TOP_N],
    }


def budget_rows(
    tenants: Sequence[str],
    limits: Sequence[BudgetLimit],
    today: Iterable[DayAggregate],
    month: Iterable[DayAggregate],
) -> list[dict[str, Any]]:
    """Used against limit per tenant (day and month to date); spend only without a limit."""
    used: dict[str, defaultdict[str, float]] = {
        "day": defaultdict(float),
        "month": defaultdict(float),
    }
    for agg in today:
        used["day"][agg.tenant] += agg.get("cost_usd")
        used["day"][ALL_TENANTS] += agg.get("cost_usd")
    for agg in month:
        used["month"][agg.tenant] += agg.get("cost_usd")
        used["month"][ALL_TENANTS] += agg.get("cost_usd")
    rows: list[dict[str, Any]] = []
    limited = {limit.tenant for limit in limits}
    for limit in limits:
        rows.append(
            {
                "tenant": limit.tenant,
                "window": limit.window,
                "used_usd": used[limit.window][limit.tenant],
                "limit_usd": limit.limit_usd,
            }
        )
    for tenant in tenants:
        if tenant not in limited:
            rows.append(
                {
                    "tenant": tenant,
                    "window": "month",
                    "used_usd": used["month"][tenant],
                    "limit_usd": None,
                }
            )
    return rows


def latency(
    aggregates: Iterable[DayAggregate], tiers: Sequence[str]
) -> dict[str, dict[str, float]]:
    """p50/p99 of end-to-end latency and time to first token per tier, over every served
    request of the range (from the aggregates' histograms; bucket upper bounds, in ms)."""
    buckets: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for agg in aggregates:
        for kind in ("latency", "ttft"):
            for name, count in _named(agg.values, f"{kind}_ms_le:").items():
                tier, _, bound = name.rpartition(":")
                buckets[(kind, tier)][bound] += count
    seen = sorted({tier for _, tier in buckets} - set(tiers))
    return {
        tier: {
            "count": sum(buckets[("latency", tier)].values()),
            "latency_p50_ms": quantile(buckets[("latency", tier)], 0.5),
            "latency_p99_ms": quantile(buckets[("latency", tier)], 0.99),
            "ttft_p50_ms": quantile(buckets[("ttft", tier)], 0.5),
            "ttft_p99_ms": quantile(buckets[("ttft", tier)], 0.99),
        }
        for tier in [*tiers, *seen]
    }


def denials(events: Iterable[SpendEvent], limit: int) -> list[dict[str, Any]]:
    """The newest refused requests first."""
    refused = [e for e in events if e.kind == "denied"]
    refused.sort(key=lambda e: e.ts, reverse=True)
    return [
        {
            "ts": e.ts,
            "tenant": e.tenant,
            "key_id": e.key_id,
            "reason": e.status,
            "tier": e.tier,
            "model": e.model,
            "request_id": e.request_id,
        }
        for e in refused[:limit]
    ]


def tool_calls(aggregates: Iterable[DayAggregate]) -> dict[str, Any]:
    """MCP tool calls over the range: totals, and per ``SERVER.TOOL`` (most called first)
    their calls, errors, mean duration and cost. Their cost is also in ``cost_usd``."""
    tools: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    totals: dict[str, float] = defaultdict(float)
    fields = {
        "tool_calls:": "calls",
        "tool_errors:": "errors",
        "tool_ms:": "ms",
        "tool_cost:": "cost_usd",
    }
    for agg in aggregates:
        for name in ("tool_calls", "tool_errors", "tool_cost_usd"):
            totals[name] += agg.get(name)
        for prefix, field in fields.items():
            for tool, value in _named(agg.values, prefix).items():
                tools[tool][field] += value
    ranked = sorted(tools.items(), key=lambda item: (-item[1]["calls"], item[0]))
    rows = [
        {
            "tool": tool,
            "calls": row["calls"],
            "errors": row["errors"],
            "mean_ms": row["ms"] / row["calls"] if row["calls"] else None,
            "cost_usd": row["cost_usd"],
        }
        for tool, row in ranked
    ]
    return {
        "calls": totals["tool_calls"],
        "errors": totals["tool_errors"],
        "cost_usd": totals["tool_cost_usd"],
        "tools": rows[: TOP_N * 5],
    }


def recent_tool_calls(events: Iterable[SpendEvent], limit: int) -> list[dict[str, Any]]:
    """The newest MCP tool calls first, as the ledger keeps them."""
    calls = [e for e in events if e.kind == "tool_call"]
    calls.sort(key=lambda e: e.ts, reverse=True)
    return [
        {
            "ts": e.ts,
            "tenant": e.tenant,
            "key_id": e.key_id,
            "server": e.server,
            "tool": e.tool,
            "status": e.status,
            "duration_ms": e.latency_ms,
            "result_bytes": e.result_bytes,
            "cost_usd": e.cost_usd,
            "arguments": e.arguments,
            "request_id": e.request_id,
            "model_request_id": (e.metadata or {}).get("model_request_id"),
        }
        for e in calls[:limit]
    ]
