"""Counts every replica adds to one shared window in the store, and reads back summed.

What ``routing.target_share`` (score bins) and ``routing.objective`` (λ trade-offs) learn
from recent traffic: each replica keeps its new counts pending; every ``target.sync_s``
one background task adds them to the current time bucket in the store and reads the
window's buckets back (``policies/stores/shares.py``). The request path never waits on
the store: it reads what the last sync pooled. While the store is unreachable the
pending counts are kept for the next sync.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping

from policies.routing_spec import TargetShareConfig
from policies.stores.shares import ShareStore
from policies.stores.store import StoreUnavailable

log = logging.getLogger(__name__)


class PooledCounts:
    def __init__(
        self, store: ShareStore, policy: str, learn: Callable[[Mapping[str, int]], None]
    ) -> None:
        self.store = store
        self.policy = policy  # the name of the counts in the store
        self.learn = learn  # what the policy makes of a fresh pool
        self.pending: Counter[str] = Counter()
        self.pooled: dict[str, int] = {}
        self.syncs = 0
        self._last_sync = float("-inf")
        self._syncing: asyncio.Task[None] | None = None

    def maybe_sync(self, target: TargetShareConfig, background: set[asyncio.Task[None]]) -> None:
        """Start a sync in the background when the last one is ``target.sync_s`` old."""
        now = time.monotonic()
        if self._syncing is not None or now - self._last_sync < target.sync_s:
            return
        self._last_sync = now
        task = asyncio.get_running_loop().create_task(self.sync(target))
        self._syncing = task
        background.add(task)
        task.add_done_callback(self._synced)
        task.add_done_callback(background.discard)

    def _synced(self, task: asyncio.Task[None]) -> None:
        self._syncing = None

    async def sync(self, target: TargetShareConfig) -> None:
        """Add the pending counts to the shared window and read the pooled one back."""
        pending, self.pending = self.pending, Counter()
        try:
            bucket_s = target.window_s / target.buckets
            current = int(await self.store.now() // bucket_s)
            await self.store.add(self.policy, current, pending, ttl_s=target.window_s + bucket_s)
            buckets = range(current - target.buckets + 1, current + 1)
            pooled = await self.store.read(self.policy, buckets)
        except StoreUnavailable as exc:
            self.pending.update(pending)  # kept for the next sync
            log.warning("%s: the shared counts are unreachable: %s", self.policy, exc)
            return
        self.syncs += 1
        self.pooled = pooled
        self.learn(pooled)
