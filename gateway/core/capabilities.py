"""What each tier can honour, checked before dispatch: a request field an engine cannot
honour is a 400 naming it, a content part of a modality the tier lacks (or cannot price:
``gateway.money.part_pricing``) is a 400 ``unsupported_content``; ``auto`` first moves such a
request to a permitted tier that can serve it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from backends.base import FEATURES, GenerationRequest, requested_features
from backends.messages import content_modalities
from backends.pool import Replica
from gateway.errors import InvalidRequest
from gateway.money.part_pricing import priceable
from policies.schema import GatewayConfig
from policies.tenants import Principal
from routers.decision import TierDecision, permitted_tiers


@dataclass(frozen=True, slots=True)
class TierSupport:
    features: frozenset[str]
    modalities: frozenset[str]
    priced: frozenset[str]  # the non-text modalities a reservation can price


Replicas = Mapping[str, Sequence[Replica]]


def tier_support(config: GatewayConfig, replicas: Replicas, tier: str) -> TierSupport:
    """What every engine of the tier honours (any replica may serve the request), by the
    request's config snapshot: its prices and part rules, never a later policy's."""
    features: frozenset[str] | None = None
    modalities: frozenset[str] | None = None
    priced: frozenset[str] | None = None
    for name in config.tiers[tier].engines:
        spec = config.engines[name]
        found = frozenset(spec.modalities) | {"text"}
        modalities = found if modalities is None else modalities & found
        rules = priceable(config, spec.model)
        priced = rules if priced is None else priced & rules
        for replica in replicas.get(name, ()):
            declared = replica.engine.capabilities
            features = declared if features is None else features & declared
    # No replica yet (endpoints still being discovered): nothing to refuse on; the pool
    # answers for availability.
    return TierSupport(
        FEATURES if features is None else features,
        modalities or frozenset({"text"}),
        priced or frozenset(),
    )


def shortfall(support: TierSupport, request: GenerationRequest) -> InvalidRequest | None:
    """The 400 this request gets on a tier with this support, or None if it can serve it."""
    for modality, param in content_modalities(request.messages or ()).items():
        if modality not in support.modalities:
            return InvalidRequest(
                f"this model does not accept {modality} content ({param})",
                param=param,
                code="unsupported_content",
            )
        if modality not in support.priced:
            return InvalidRequest(
                f"{modality} content ({param}) cannot be priced on this model: its budget "
                f"reservation needs a rule in budgets.part_tokens for {modality}",
                param=param,
                code="unsupported_content",
            )
    for feature, param in requested_features(request).items():
        if feature not in support.features:
            return InvalidRequest(
                f"`{param}` is not supported by this model's backend",
                param=param,
                code="unsupported_parameter",
            )
    return None


def demands(request: GenerationRequest) -> bool:
    """Whether the request uses a non-text part or an optional feature: a plain text
    request fits every tier, so its tiers' support is not worked out (every request)."""
    return bool(content_modalities(request.messages or ()) or requested_features(request))


def fit_tier(
    config: GatewayConfig,
    replicas: Replicas,
    principal: Principal,
    decision: TierDecision,
    request: GenerationRequest,
) -> TierDecision:
    """The decision, moved (``auto`` only) to a tier able to serve the request; else 400."""
    if not demands(request):
        return decision
    problem = shortfall(tier_support(config, replicas, decision.tier), request)
    if problem is None:
        return decision
    if decision.movable:
        order = permitted_tiers(config, principal.policy)
        here = order.index(decision.tier) if decision.tier in order else 0
        # Larger tiers first (they tend to have more), then smaller ones.
        for tier in order[here + 1 :] + order[:here][::-1]:
            if shortfall(tier_support(config, replicas, tier), request) is None:
                note = f"tier {decision.tier} cannot serve {problem.param}: moved to {tier}"
                return replace(decision, tier=tier, trail=(*decision.trail, note))
    raise problem
