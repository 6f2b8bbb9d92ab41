"""A seeded spend ledger for the dashboard tests, and what each view must then show.

The expected numbers are summed here from the events themselves, independently of
``gateway.admin.report``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from policies.stores.latency_buckets import BOUNDS_MS
from policies.stores.ledger import SpendEvent

ADMIN_KEY = "tg-admin-key-for-tests-000111"
TIERS = ("small", "medium", "large")
TENANTS = ("acme", "globex")


def day_ts(days_ago: int, second: int) -> float:
    """A time ``days_ago`` UTC days back; today's events stay in the past."""
    if days_ago == 0:
        return time.time() - 60 + second / 100
    start = datetime.combine(
        datetime.now(UTC).date() - timedelta(days=days_ago), datetime.min.time(), UTC
    )
    return start.timestamp() + 3600 + second


def _event(days_ago: int, n: int, tenant: str, tier: str, **extra: Any) -> SpendEvent:
    values: dict[str, Any] = {
        "ts": day_ts(days_ago, n),
        "request_id": f"req-{days_ago}-{n}",
        "tenant": tenant,
        "key_id": f"{tenant}-1",
        "tier": tier,
        "model": f"fake-{tier}",
        "prompt_tokens": 100,
        "completion_tokens": 20,
    }
    values.update(extra)
    return SpendEvent(**values)


def seeded_events() -> list[SpendEvent]:
    return [
        _event(
            0, 1, "acme", "small", cost_usd=0.25, saved_routing_usd=2.0, latency_ms=100, ttft_ms=10
        ),
        _event(
            0, 2, "acme", "small", cost_usd=0.5, saved_routing_usd=3.0, latency_ms=300, ttft_ms=30
        ),
        _event(0, 3, "acme", "large", cost_usd=4.0, latency_ms=2000, ttft_ms=400),
        _event(0, 4, "acme", "small", cache="exact", saved_cache_usd=0.75, latency_ms=5, ttft_ms=2),
        _event(
            0,
            5,
            "acme",
            "small",
            kind="denied",
            status="budget",
            prompt_tokens=0,
            completion_tokens=0,
        ),
        _event(
            1,
            1,
            "globex",
            "medium",
            cost_usd=1.0,
            saved_routing_usd=5.0,
            latency_ms=800,
            ttft_ms=80,
        ),
        _event(
            1,
            2,
            "globex",
            "medium",
            cost_usd=1.5,
            saved_routing_usd=6.0,
            latency_ms=900,
            ttft_ms=90,
        ),
        _event(
            1,
            3,
            "globex",
            "medium",
            cache="semantic",
            saved_cache_usd=1.25,
            latency_ms=20,
            ttft_ms=4,
        ),
        _event(
            1,
            4,
            "globex",
            "medium",
            kind="denied",
            status="rate_limit",
            prompt_tokens=0,
            completion_tokens=0,
        ),
        _event(
            3, 1, "acme", "medium", cost_usd=2.0, saved_routing_usd=7.0, latency_ms=700, ttft_ms=70
        ),
        _event(20, 1, "globex", "large", cost_usd=8.0, latency_ms=3000, ttft_ms=500),
    ]


@dataclass(frozen=True)
class Expected:
    days: list[str]
    spend: dict[str, list[float]]
    requests_by_tier: dict[str, list[float]]
    tier_mix: dict[str, float]
    cost: float
    saved_routing: float
    saved_cache: float
    cache: dict[str, float]
    tenant_spend: dict[str, float]
    model_requests: dict[str, float]
    denials: list[str]  # request ids, newest first
    latency: dict[str, dict[str, float]]  # tier -> p50/p99 of latency and ttft (bucket bounds)
    month_used: dict[str, float]


def _nearest_rank_bucket(values: list[float], q: int) -> float:
    """The upper bound of the histogram bucket that holds the nearest-rank percentile."""
    if not values:
        return 0.0
    ordered = sorted(values)
    value = ordered[max(-(-q * len(ordered) // 100), 1) - 1]
    return float(next((b for b in BOUNDS_MS if value <= b), BOUNDS_MS[-1]))


def expected(events: list[SpendEvent], start: date, end: date) -> Expected:
    days = [(start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]
    inside = [
        e
        for e in events
        if days[0] <= datetime.fromtimestamp(e.ts, UTC).date().isoformat() <= days[-1]
    ]
    served = [e for e in inside if e.kind == "request"]
    spend = {t: [0.0] * len(days) for t in TENANTS}
    by_tier = {t: [0.0] * len(days) for t in TIERS}
    cache: dict[str, float] = defaultdict(float)
    tenant_spend: dict[str, float] = defaultdict(float)
    models: dict[str, float] = defaultdict(float)
    for e in served:
        i = days.index(datetime.fromtimestamp(e.ts, UTC).date().isoformat())
        spend[e.tenant][i] += e.cost_usd
        by_tier[e.tier][i] += 1
        cache[e.cache] += 1
        tenant_spend[e.tenant] += e.cost_usd
        models[e.model] += 1
    latency: dict[str, dict[str, float]] = {}
    for tier in TIERS:
        ok = [e for e in served if e.tier == tier and e.status == "ok"]
        lat, ttft = [e.latency_ms for e in ok], [e.ttft_ms for e in ok]
        latency[tier] = {
            "latency_p50_ms": _nearest_rank_bucket(lat, 50),
            "latency_p99_ms": _nearest_rank_bucket(lat, 99),
            "ttft_p50_ms": _nearest_rank_bucket(ttft, 50),
            "ttft_p99_ms": _nearest_rank_bucket(ttft, 99),
        }
    this_month = datetime.now(UTC).date().replace(day=1)
    month_used: dict[str, float] = defaultdict(float)
    for e in events:
        if e.kind == "request" and datetime.fromtimestamp(e.ts, UTC).date() >= this_month:
            month_used[e.tenant] += e.cost_usd
    return Expected(
        days=days,
        spend=spend,
        requests_by_tier=by_tier,
        tier_mix={t: sum(v) for t, v in by_tier.items()},
        cost=sum(e.cost_usd for e in served),
        saved_routing=sum(e.saved_routing_usd for e in served),
        saved_cache=sum(e.saved_cache_usd for e in served),
        cache={k: cache[k] for k in ("exact", "semantic", "miss", "bypass")},
        tenant_spend=dict(tenant_spend),
        model_requests=dict(models),
        denials=[e.request_id for e in sorted(inside, key=lambda e: -e.ts) if e.kind == "denied"],
        latency=latency,
        month_used={t: month_used[t] for t in TENANTS},
    )


def admin_config(base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with the admin key set by digest (no environment needed)."""
    import hashlib

    digest = hashlib.sha256(ADMIN_KEY.encode()).hexdigest()
    # These tests try many wrong keys on purpose: the guess throttle has its own test.
    throttle = {"failures_per_minute": 1000, "failures_per_minute_total": 1000}
    return {**base, "admin": {"key_sha256": digest, **throttle}}
