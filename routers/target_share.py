"""``routing.target_share``: thresholds from the score quantiles of recent traffic.

Each classified ``auto`` request adds its score (and the tier that score got) to this
replica's pending counts; every ``target.sync_s`` one background task adds them to the
policy's shared sketch in the store and reads the pooled sketch back, from which the
thresholds are recomputed. Every replica reads the same pooled counts, so they route
by the same thresholds. The request path never waits on the store: it reads the last
computed thresholds. Until ``target.min_samples`` scores were seen, or while the store
is unreachable and nothing was ever read, ``routing.thresholds`` apply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from policies.routing_spec import RoutingConfig
from policies.stores.shares import ShareStore
from routers.decision import tier_for_score
from routers.pooled_counts import PooledCounts
from routers.score_sketch import bin_of, thresholds_for

POLICY = "routing"  # the gateway's one routing policy; the sketch's name in the store


class TargetShares:
    def __init__(self, store: ShareStore) -> None:
        self.counts = PooledCounts(store, POLICY, self._learn)
        self._learned: tuple[float, float] | None = None
        self._routing: RoutingConfig | None = None
        self._tiers: tuple[str, ...] = ()
        self.samples = 0  # scores in the pooled window at the last sync

    @property
    def syncs(self) -> int:
        return self.counts.syncs

    def thresholds(
        self, routing: RoutingConfig, tiers: Sequence[str], background: set[asyncio.Task[None]]
    ) -> tuple[tuple[float, float], str]:
        """The thresholds to route by now, and why (for the decision trail)."""
        if routing.target_share is None:
            return routing.thresholds, "thresholds"
        self._maybe_sync(routing, tiers, background)
        if self._learned is None:
            return routing.thresholds, (
                f"target_share after {routing.target.min_samples} scores "
                f"({self.samples} pooled): thresholds meanwhile"
            )
        return self._learned, "target_share quantiles"

    def route(
        self,
        routing: RoutingConfig,
        tiers: Sequence[str],
        score: float,
        background: set[asyncio.Task[None]],
    ) -> tuple[tuple[float, float], str]:
        """The thresholds for this score (and why); the score joins the sketch."""
        bounds, why = self.thresholds(routing, tiers, background)
        self.observe(routing, tiers, score, bounds, background)
        return bounds, why

    def observe(
        self,
        routing: RoutingConfig,
        tiers: Sequence[str],
        score: float,
        thresholds: tuple[float, float],
        background: set[asyncio.Task[None]],
    ) -> None:
        if routing.target_share is None:
            return
        self.counts.pending[f"b{bin_of(score)}"] += 1
        self.counts.pending[f"t{tier_for_score(score, tiers, thresholds)}"] += 1
        self._maybe_sync(routing, tiers, background)

    def _maybe_sync(
        self, routing: RoutingConfig, tiers: Sequence[str], background: set[asyncio.Task[None]]
    ) -> None:
        self._routing, self._tiers = routing, tuple(tiers)
        self.counts.maybe_sync(routing.target, background)

    async def sync(self, routing: RoutingConfig, tiers: Sequence[str]) -> None:
        """Add the pending counts to the shared sketch and read the pooled one back."""
        self._routing, self._tiers = routing, tuple(tiers)
        await self.counts.sync(routing.target)

    def _learn(self, pooled: Mapping[str, int]) -> None:
        routing = self._routing
        bins = {int(k[1:]): n for k, n in pooled.items() if k.startswith("b")}
        self.samples = sum(bins.values())
        if routing is not None and routing.target_share is not None:
            if self.samples >= routing.target.min_samples:
                self._learned = thresholds_for(bins, self._tiers, routing.target_share)
                return
        self._learned = None

    def report(self, routing: RoutingConfig, tiers: Sequence[str]) -> dict[str, Any]:
        """Target vs actual share per tier over the pooled window (the admin overview)."""
        routed = {t: self.counts.pooled.get(f"t{t}", 0) for t in tiers}
        total = sum(routed.values())
        shares = routing.target_share
        thresholds = self._learned if shares is not None and self._learned else routing.thresholds
        return {
            "policy": POLICY,
            "source": "target_share" if shares is not None and self._learned else "thresholds",
            "thresholds": list(thresholds),
            "samples": self.samples,
            "window_s": routing.target.window_s,
            "tiers": [
                {
                    "tier": t,
                    "target": None if shares is None else shares[t],
                    "actual": routed[t] / total if total else None,
                    "requests": routed[t],
                }
                for t in tiers
            ],
        }
