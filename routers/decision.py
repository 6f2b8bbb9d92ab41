"""From the requested ``model`` (and, for ``auto``, a complexity score) to a tier.

One place turns numbers into decisions; every step it takes is written to the
trail that ``POST /v1/route`` shows. The order, for ``auto``:

1. under ``routing.objective`` the tier of the objective's choice (``routers.objective``),
   else score → tier by the policy's thresholds (no score: the tenant's default tier);
2. a tier forced by the ``x-tiergate-tier`` header, when the tenant may;
3. the tenant's ``min_tier`` / ``max_tier``;
4. the tenant's ``allowed_tiers`` (the nearest allowed tier at or below);

Budget-aware downgrade happens later, at admission, where the reservation is made in
the same step (``gateway.money.hold``), so a tier is never chosen on a stale balance;
failover (``gateway.core.serving``) is the only other move. Both go through
``TierDecision.moved``, so the one trail shows every step.

A tier or model named explicitly is never moved: if the tenant may not use it, that
is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from policies.schema import GatewayConfig, TenantSpec
from routers.objective import TierChoice


class UnknownModel(LookupError):
    pass


class UnknownTier(LookupError):
    pass


class TierNotAllowed(PermissionError):
    pass


@dataclass(frozen=True, slots=True)
class TierDecision:
    tier: str
    pinned_model: str | None
    score: float | None
    trail: tuple[str, ...]
    movable: bool = False  # ``auto`` without a forced tier: later rules may still move it
    thresholds: tuple[float, float] | None = None  # what the score was mapped by
    choice: TierChoice | None = None  # routing.objective's choice, with its predictions and λ

    def moved(self, tier: str, why: str) -> TierDecision:
        """The decision moved to ``tier`` (budget downgrade, failover), the move on its trail."""
        return replace(self, tier=tier, pinned_model=None, trail=(*self.trail, why))

    def noted(self, note: str) -> TierDecision:
        return replace(self, trail=(*self.trail, note))


def tier_for_score(score: float, tiers: Sequence[str], thresholds: tuple[float, float]) -> str:
    """Tiers in file order, cheapest first: below ``low`` the first, from ``high`` the last."""
    low, high = thresholds
    if score < low:
        return tiers[0]
    if score >= high:
        return tiers[-1]
    return tiers[min(1, len(tiers) - 1)]


def permitted_tiers(config: GatewayConfig, policy: TenantSpec) -> list[str]:
    """The tiers this tenant may use, cheapest first."""
    order = list(config.tiers)
    low = order.index(policy.min_tier) if policy.min_tier is not None else 0
    high = order.index(policy.max_tier) if policy.max_tier is not None else len(order) - 1
    allowed = policy.allowed_tiers
    return [t for t in order[low : high + 1] if allowed is None or t in allowed]


def may_answer(
    config: GatewayConfig,
    policy: TenantSpec,
    requested_model: str,
    forced_tier: str | None,
    tier: str,
    model: str,
) -> bool:
    """Whether an answer ``model`` gave on ``tier`` is one this request could have had
    live: the tier a name or an ``x-tiergate-tier`` header pins (and the model a model
    name pins), else, for ``auto``, any tier the tenant and key allow (min/max/allowed).
    A cached answer is served only when this holds (``gateway.cache.service``)."""
    if requested_model != "auto":
        if requested_model in config.tiers:
            return tier == requested_model
        return model == requested_model and tier == config.tier_of_model(requested_model)
    if forced_tier is not None and policy.allow_tier_header:
        return tier == forced_tier
    return tier in permitted_tiers(config, policy)


def _check_explicit(tier: str, permitted: list[str], how: str) -> None:
    if tier not in permitted:
        raise TierNotAllowed(f"tier {tier!r} ({how}) is not allowed for this tenant")


def _within_policy(tier: str, config: GatewayConfig, policy: TenantSpec, trail: list[str]) -> str:
    order = list(config.tiers)
    if policy.min_tier is not None and order.index(tier) < order.index(policy.min_tier):
        tier = policy.min_tier
        trail.append(f"tenant min_tier: {tier}")
    if policy.max_tier is not None and order.index(tier) > order.index(policy.max_tier):
        tier = policy.max_tier
        trail.append(f"tenant max_tier: {tier}")
    permitted = permitted_tiers(config, policy)
    if tier not in permitted:
        below = [t for t in permitted if order.index(t) <= order.index(tier)]
        if below:
            tier = below[-1]
        elif permitted:
            tier = permitted[0]
        else:
            raise TierNotAllowed("no tier is allowed for this tenant")
        trail.append(f"tenant allowed_tiers: {tier}")
    return tier


def decide(
    config: GatewayConfig,
    policy: TenantSpec,
    requested_model: str,
    score: float | None = None,
    forced_tier: str | None = None,
    thresholds: tuple[float, float] | None = None,
    why: str = "thresholds",
    choice: TierChoice | None = None,
) -> TierDecision:
    """``thresholds``: the ones to route by (``routing.target_share`` learns them from
    traffic, ``why`` says so in the trail); default ``routing.thresholds``. ``choice``:
    the objective's tier for ``auto`` (``routing.objective``), instead of thresholds."""
    trail: list[str] = []
    permitted = permitted_tiers(config, policy)
    if requested_model != "auto":
        if forced_tier is not None:
            trail.append("x-tiergate-tier ignored: a model was named")
        if requested_model in config.tiers:
            _check_explicit(requested_model, permitted, "requested by name")
            trail.append(f"tier {requested_model} requested by name")
            return TierDecision(requested_model, None, score, tuple(trail))
        found = config.tier_of_model(requested_model)
        if found is None:
            raise UnknownModel(requested_model)
        _check_explicit(found, permitted, f"serves {requested_model}")
        trail.append(f"model {requested_model} is served by tier {found}")
        return TierDecision(found, requested_model, score, tuple(trail))
    used = None
    if choice is not None:
        tier = choice.tier
        quality = ", ".join(
            f"{t} {q:.3f}" for t, q in zip(choice.tiers, choice.quality, strict=True)
        )
        trail.append(f"P(acceptable) {quality}; {choice.reason}: {tier}")
    elif score is None:
        tier = policy.default_tier
        trail.append(f"auto without a score: tenant default tier {tier}")
    else:
        bounds = thresholds or config.routing.thresholds
        tier = tier_for_score(score, list(config.tiers), bounds)
        shown = f"({bounds[0]:.3f}, {bounds[1]:.3f})" if thresholds else str(bounds)
        trail.append(f"score {score:.3f} with {why} {shown}: {tier}")
        used = bounds
    if forced_tier is not None:
        if forced_tier not in config.tiers:
            raise UnknownTier(forced_tier)
        if not policy.allow_tier_header:
            raise TierNotAllowed("this tenant may not force a tier with x-tiergate-tier")
        _check_explicit(forced_tier, permitted, "forced by header")
        trail.append(f"x-tiergate-tier forces {forced_tier}")
        return TierDecision(forced_tier, None, score, tuple(trail), thresholds=used, choice=choice)
    tier = _within_policy(tier, config, policy, trail)
    return TierDecision(
        tier, None, score, tuple(trail), movable=True, thresholds=used, choice=choice
    )
