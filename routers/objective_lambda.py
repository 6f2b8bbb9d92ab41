"""``routing.objective`` across replicas: λ from the trade-offs of recent, pooled traffic.

Each classified ``auto`` request adds its per-tier expected quality and cost, as the λ
breakpoints of ``routers.objective.steps``, to this replica's pending sketch
(``routers/lambda_sketch.py``); every ``target.sync_s`` the sketch is pooled with the
other replicas' through the store (``routers/pooled_counts.py``) and λ recomputed from
the pooled window, so every replica routes by the same λ. Until ``target.min_samples``
requests are pooled, each request meets the objective on its own (the trail says so).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from policies.routing_spec import RoutingConfig
from policies.schema import GatewayConfig
from policies.stores.shares import ShareStore
from routers.lambda_sketch import COST_UNIT, QUALITY_UNIT, cost_count, quality_count
from routers.objective import (
    Operating,
    TierChoice,
    decide_tier,
    objective_of,
    operating,
    sketch_request,
    traffic_operating,
)
from routers.objective_segment import tiers_in
from routers.pooled_counts import PooledCounts
from routers.tier_costs import cost_matrix, expected_costs

Array = npt.NDArray[np.float64]

POLICY = "objective"  # the sketch's name in the store


def reference_operating(
    config: GatewayConfig, reference: tuple[Array, Array] | None
) -> Operating | None:
    """λ and segment for the configured objective on the quality model's reference traffic
    (its training prompts at this config's prices): what applies until traffic is pooled."""
    objective = config.routing.objective
    if objective is None or reference is None:
        return None
    quality, chars = reference
    cost = cost_matrix(config, objective, chars)
    return traffic_operating(
        np.asarray(quality, dtype=np.float64),
        cost,
        objective_of(objective),
    )


class ObjectiveLambda:
    def __init__(self, store: ShareStore, reference: tuple[Any, Any] | None = None) -> None:
        self.counts = PooledCounts(store, POLICY, self._learn)
        self.reference = reference  # the quality model's reference traffic (P, characters)
        self._routing: RoutingConfig | None = None
        self._prior: tuple[GatewayConfig, Operating | None] | None = None  # a config, its λ
        self.lam: float | None = None  # None: too little pooled
        self.allowed: tuple[int, ...] | None = None  # the objective's hull segment
        self.samples = 0  # requests in the pooled window at the last sync

    def prior(self, config: GatewayConfig) -> Operating | None:
        """The reference traffic's λ and segment for this config snapshot (once each;
        ``prepare`` computes it before the snapshot serves)."""
        if self._prior is None or self._prior[0] is not config:
            self._prior = (config, reference_operating(config, self.reference))
        return self._prior[1]

    def prepared(self, config: GatewayConfig) -> bool:
        """Whether ``config``'s prior is computed (no request on it will compute it)."""
        return self._prior is not None and self._prior[0] is config

    async def prepare(self, config: GatewayConfig) -> None:
        """Compute ``config``'s prior off the event loop (tens of ms of numpy over the
        reference traffic), so the first ``auto`` request on it does not stall the loop."""
        operating = await asyncio.to_thread(reference_operating, config, self.reference)
        self._prior = (config, operating)

    def choose(
        self,
        config: GatewayConfig,
        quality: Sequence[float],
        chars: int,
        background: set[asyncio.Task[None]],
        observe: bool = True,
    ) -> TierChoice:
        """The tier for one request; ``observe``: it joins the sketch (``/v1/route``: not)."""
        objective = config.routing.objective
        assert objective is not None  # callers route by the objective only when it is set
        cost = expected_costs(config, objective, chars)
        if observe:
            sketch_request(self.counts.pending, quality, cost)
        lam, allowed, why = self.operating(config, background)
        choice = decide_tier(
            tuple(config.tiers),
            quality,
            cost,
            lam,
            objective_of(objective),
            why,
            allowed,
        )
        if observe:
            self.chose(quality, cost, choice.tiers.index(choice.tier))
        return choice

    def operating(
        self, config: GatewayConfig, background: set[asyncio.Task[None]]
    ) -> tuple[float | None, tuple[int, ...] | None, str]:
        """λ, the objective's hull segment and why, as requests are routed now (pooled
        traffic, else the reference traffic's); syncs the sketch when it is time."""
        self._routing = config.routing
        self.counts.maybe_sync(config.routing.target, background)
        target = config.routing.target
        lam, allowed = self.lam, self.allowed
        why = f"λ from {self.samples} pooled requests"
        if lam is None:
            prior = self.prior(config)
            lam, allowed = (None, None) if prior is None else (prior.lam, prior.allowed)
            why = (
                f"λ of the reference traffic: {self.samples} of {target.min_samples} "
                "requests pooled"
            )
        return lam, allowed, why

    def observe(self, config: GatewayConfig, quality: Sequence[float], chars: int) -> None:
        """A fresh prediction joins the sketch (a session's new instruction), priced cold
        as every sketched request is."""
        objective = config.routing.objective
        assert objective is not None
        sketch_request(self.counts.pending, quality, expected_costs(config, objective, chars))

    def chose(self, quality: Sequence[float], cost: Sequence[float], picked: int) -> None:
        """What the objective chose, for "quality given up" on the dashboard."""
        self.counts.pending["QC"] += quality_count(quality[picked])
        self.counts.pending["CC"] += cost_count(cost[picked] / cost[-1] if cost[-1] else 0.0)

    async def sync(self, routing: RoutingConfig) -> None:
        self._routing = routing
        await self.counts.sync(routing.target)

    def _learn(self, pooled: Mapping[str, int]) -> None:
        routing = self._routing
        self.samples = pooled.get("n", 0)
        if routing is None or routing.objective is None:
            self.lam = None
            return
        objective = routing.objective
        if self.samples < routing.target.min_samples:
            self.lam, self.allowed = None, None
            return
        kind = objective_of(objective)
        where = operating(pooled, tiers_in(pooled), kind)
        self.lam, self.allowed = where.lam, where.allowed or None

    def report(self, routing: RoutingConfig) -> dict[str, Any]:
        """λ, and over the pooled window the expected quality (mean P(acceptable)) and
        cost of what the objective chose against always the largest tier."""
        pooled = self.counts.pooled
        objective = routing.objective
        n = pooled.get("n", 0)
        return {
            "policy": POLICY,
            "objective": None if objective is None else {objective.kind: objective.share},
            "lambda": self.lam,
            "samples": self.samples,
            "window_s": routing.target.window_s,
            "expected": None if not n else _expected(pooled, n),
        }


def _expected(pooled: Mapping[str, int], n: int) -> dict[str, float]:
    chosen, largest = pooled.get("QC", 0) * QUALITY_UNIT / n, pooled.get("QL", 0) * QUALITY_UNIT / n
    spent, always = pooled.get("CC", 0) * COST_UNIT, pooled.get("CL", 0) * COST_UNIT
    return {
        "quality": chosen,
        "quality_always_largest": largest,
        "quality_given_up": largest - chosen,
        "cost_share": spent / always if always else 0.0,  # of always-largest, per request
    }
