"""The configured ``auto`` policy over a batch of requests treated as the recent traffic.

What ``tiergate classify`` prints per row: the tier the gateway would choose if these
requests were the window ``routing.objective`` (λ) or ``routing.target_share`` (score
quantiles) learns from, with the same fallback while the window holds fewer than
``target.min_samples`` requests. So the policy that serves is the policy that is scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from policies.schema import GatewayConfig
from routers.classifier import ComplexityScore
from routers.decision import tier_for_score
from routers.features import message_text
from routers.objective import objective_of, route_operating
from routers.objective_lambda import reference_operating
from routers.tier_costs import expected_costs


def traffic_tiers(
    config: GatewayConfig,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    scores: Sequence[ComplexityScore],
    reference: tuple[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """Per request ``{"tier": ...}`` and, under an objective, its λ (None: each alone) and
    the tiers it chose among (the objective's hull segment);
    ``reference``: the quality model's reference traffic, for fewer than min_samples."""
    tiers = list(config.tiers)
    routing = config.routing
    if not scores:
        return []
    objective = routing.objective
    if objective is not None and all(s.quality is not None for s in scores):
        quality = np.asarray([s.quality for s in scores], dtype=np.float64)
        chars = [sum(len(message_text(m)) for m in c) for c in conversations]
        cost = np.asarray([expected_costs(config, objective, n) for n in chars])
        picked, where = route_operating(
            quality,
            cost,
            objective_of(objective),
            routing.target.min_samples,
            reference_operating(config, reference),
        )
        lam = None if where is None else where.lam
        among = list(tiers) if where is None else [tiers[t] for t in where.allowed]
        return [{"tier": tiers[t], "lambda": lam, "among": among} for t in picked]
    bounds = routing.thresholds
    shares = routing.target_share
    if shares is not None and len(scores) >= routing.target.min_samples and len(tiers) <= 3:
        values = np.asarray([s.score for s in scores])
        low = float(np.quantile(values, shares[tiers[0]]))
        middle = shares[tiers[1]] if len(tiers) == 3 else 0.0
        high = float(np.quantile(values, shares[tiers[0]] + middle))
        bounds = (low, max(low, high))
    return [{"tier": tier_for_score(s.score, tiers, bounds)} for s in scores]
