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
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from policies.schema import RoutingConfig
from policies.score_sketch import bin_of, thresholds_for
from policies.share_store import ShareStore
from policies.store import StoreUnavailable
from routers.decision import tier_for_score

log = logging.getLogger(__name__)

POLICY = "routing"  # the gateway's one routing policy; the sketch's name in the store


class TargetShares:
    def __init__(self, store: ShareStore) -> None:
        self.store = store
        self._pending: Counter[str] = Counter()
        self._pooled: dict[str, int] = {}
        self._learned: tuple[float, float] | None = None
        self._last_sync = float("-inf")
        self._syncing: asyncio.Task[None] | None = None
        self.samples = 0  # scores in the pooled window at the last sync
        self.syncs = 0

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
        self._pending[f"b{bin_of(score)}"] += 1
        self._pending[f"t{tier_for_score(score, tiers, thresholds)}"] += 1
        self._maybe_sync(routing, tiers, background)

    def _maybe_sync(
        self, routing: RoutingConfig, tiers: Sequence[str], background: set[asyncio.Task[None]]
    ) -> None:
        now = time.monotonic()
        if self._syncing is not None or now - self._last_sync < routing.target.sync_s:
            return
        self._last_sync = now
        task = asyncio.get_running_loop().create_task(self.sync(routing, tuple(tiers)))
        self._syncing = task
        background.add(task)
        task.add_done_callback(self._synced)
        task.add_done_callback(background.discard)

    def _synced(self, task: asyncio.Task[None]) -> None:
        self._syncing = None

    async def sync(self, routing: RoutingConfig, tiers: Sequence[str]) -> None:
        """Add the pending counts to the shared sketch and read the pooled one back."""
        target = routing.target
        pending, self._pending = self._pending, Counter()
        try:
            bucket_s = target.window_s / target.buckets
            current = int(await self.store.now() // bucket_s)
            await self.store.add(POLICY, current, pending, ttl_s=target.window_s + bucket_s)
            pooled = await self.store.read(POLICY, range(current - target.buckets + 1, current + 1))
        except StoreUnavailable as exc:
            self._pending.update(pending)  # kept for the next sync
            log.warning("target_share: the shared score sketch is unreachable: %s", exc)
            return
        self.syncs += 1
        self._pooled = pooled
        bins = {int(k[1:]): n for k, n in pooled.items() if k.startswith("b")}
        self.samples = sum(bins.values())
        if routing.target_share is not None and self.samples >= target.min_samples:
            self._learned = thresholds_for(bins, tiers, routing.target_share)
        else:
            self._learned = None

    def report(self, routing: RoutingConfig, tiers: Sequence[str]) -> dict[str, Any]:
        """Target vs actual share per tier over the pooled window (the admin overview)."""
        routed = {t: self._pooled.get(f"t{t}", 0) for t in tiers}
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
