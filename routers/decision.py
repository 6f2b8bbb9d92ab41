"""From the requested ``model`` (and, for ``auto``, a complexity score) to a tier.

One place turns numbers into decisions; every step it takes is written to the
trail that ``POST /v1/route`` shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.schema import GatewayConfig, TenantSpec


class UnknownModel(LookupError):
    pass


class TierNotAllowed(PermissionError):
    pass


@dataclass(frozen=True, slots=True)
class TierDecision:
    tier: str
    pinned_model: str | None
    score: float | None
    trail: tuple[str, ...]


def tier_for_score(score: float, tiers: list[str], thresholds: tuple[float, float]) -> str:
    """Tiers in file order, cheapest first: below ``low`` the first, from ``high`` the last."""
    low, high = thresholds
    if score < low:
        return tiers[0]
    if score >= high:
        return tiers[-1]
    return tiers[min(1, len(tiers) - 1)]


def decide(
    config: GatewayConfig,
    policy: TenantSpec,
    requested_model: str,
    score: float | None = None,
) -> TierDecision:
    trail: list[str] = []
    pinned: str | None = None
    if requested_model == "auto":
        if score is None:
            tier = policy.default_tier
            trail.append(f"auto without a score: tenant default tier {tier}")
        else:
            tier = tier_for_score(score, list(config.tiers), config.routing.thresholds)
            trail.append(f"score {score:.3f} with thresholds {config.routing.thresholds}: {tier}")
    elif requested_model in config.tiers:
        tier = requested_model
        trail.append(f"tier {tier} requested by name")
    else:
        found = config.tier_of_model(requested_model)
        if found is None:
            raise UnknownModel(requested_model)
        tier, pinned = found, requested_model
        trail.append(f"model {requested_model} is served by tier {tier}")
    allowed = policy.allowed_tiers
    if allowed is not None and tier not in allowed:
        if requested_model != "auto":
            raise TierNotAllowed(f"tier {tier!r} is not allowed for this tenant")
        order = list(config.tiers)
        below = [t for t in order[: order.index(tier) + 1] if t in allowed]
        tier = below[-1] if below else allowed[0]
        trail.append(f"tenant may not use that tier: {tier}")
    return TierDecision(tier=tier, pinned_model=pinned, score=score, trail=tuple(trail))
