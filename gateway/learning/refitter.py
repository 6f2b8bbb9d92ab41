"""The refit loop, and the model every replica serves.

Every ``refit.check_s`` a replica reads the serving version (one small read) and, when it
changed, loads that model: so all replicas serve the same refit within one period. With
``refit.online``, a replica that sees ``refit.every`` labels more than the last refit saw
(and at least ``refit.min_labels`` usable ones) takes the refit lease, fits and checks in
a worker thread (``routers.refit.check_refit``), and records the outcome; an accepted
refit becomes the new serving version. ``tiergate train-classifier --from-traffic`` runs
the same ``refit_once``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from policies.feedback_spec import RefitSpec
from policies.stores.feedback import FeedbackStore, RefitEntry
from routers.refit import (
    Correction,
    RefitOptions,
    RefitResult,
    RefittedQuality,
    check_refit,
    label_set,
)
from routers.tier_quality import ServedQuality, TierQuality

log = logging.getLogger(__name__)

KEEP_REFITS = 50  # entries of refit history kept in the store
LEASE_S = 120.0


def options_of(spec: RefitSpec) -> RefitOptions:
    return RefitOptions(spec.directions, spec.ridge, spec.holdout, spec.margin)


@dataclass(frozen=True)
class RefitRun:
    result: RefitResult
    entry: RefitEntry | None  # as stored (None: not published)


async def refit_once(
    store: FeedbackStore,
    base: TierQuality,
    serving: Correction | None,
    spec: RefitSpec,
    by: str,
    publish: bool = True,
) -> RefitRun | None:
    """Fit on the stored labels, check on the newest; None: too few labels to split."""
    counts = await store.label_counts()
    labels = label_set(await store.labels(), base.tiers)
    result = await asyncio.to_thread(check_refit, base, serving, labels, options_of(spec))
    if result is None:
        return None
    entry = RefitEntry(
        ts=await store.now(),
        decision=result.decision,
        reason=result.reason,
        trained=result.trained,
        held_out=result.held_out,
        metrics=result.metrics,
        by=by,
        labels_seen=sum(counts.values()),
    )
    if not publish:
        return RefitRun(result, None)
    accepted = result.decision == "accepted" and result.correction is not None
    model = result.correction.to_bytes() if accepted and result.correction else None
    stored = await store.add_refit(entry, model, KEEP_REFITS)
    log.info("feedback refit %s: %s", stored.decision, stored.reason)
    return RefitRun(result, stored)


class Refitter:
    def __init__(self, store: FeedbackStore, base: TierQuality | None, replica: str) -> None:
        self.store = store
        self.base = base
        self.replica = replica
        self.version = -1
        self.serving: Correction | None = None
        # What routing reads, one attribute swapped whole: a request sees one model.
        self.current: ServedQuality | None = (
            None if base is None else ServedQuality(base, self.version, refit=False)
        )

    @property
    def quality(self) -> TierQuality | None:
        return None if self.current is None else self.current.quality

    async def poll(self) -> None:
        """Load the serving model when its version changed."""
        version = await self.store.serving_version()
        if version == self.version:
            return
        version, model = await self.store.serving()
        if self.base is None:
            self.version = version
            return
        serving: Correction | None = None
        quality: TierQuality = self.base
        if model is not None:
            try:
                serving = Correction.from_bytes(model)
                quality = RefittedQuality(self.base, serving)
            except (ValueError, KeyError, OSError) as exc:
                log.error("feedback: the serving refit (version %d) cannot load: %s", version, exc)
                serving, quality = None, self.base
        self.version, self.serving = version, serving
        self.current = ServedQuality(quality, version, refit=serving is not None)

    async def maybe_refit(self, spec: RefitSpec) -> RefitRun | None:
        """Refit when enough new labels came in and this replica holds the lease."""
        if not spec.online or self.base is None:
            return None
        seen = sum((await self.store.label_counts()).values())
        last = await self.store.refits(1)
        since = seen - (last[0].labels_seen if last else 0)
        if seen < spec.min_labels or since < spec.every:
            return None
        if not await self.store.lease(self.replica, LEASE_S):
            return None
        await self.poll()  # check against what serves now
        run = await refit_once(self.store, self.base, self.serving, spec, self.replica)
        await self.poll()
        return run
