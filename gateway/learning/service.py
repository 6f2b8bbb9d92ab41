"""``Feedback``: the feedback loop as the gateway holds it (``state.parts.feedback``).

Two calls on the request path, neither of which waits on anything: ``tap`` when a request
starts (is it sampled for a shadow? then its answer's text is collected) and ``finished``
when it has ended (queue its record; start its shadow pair as a background task, if the
sampler has room). ``run`` is the background loop: write records, follow the serving
model, refit. ``client_verdict`` is ``POST /v1/feedback``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from gateway.learning.judges import Judge, KnownLabelsJudge, ModelJudge
from gateway.learning.operator_calls import OperatorDesk
from gateway.learning.records import RecordWriter, RoutedView, build_record
from gateway.learning.refitter import Refitter
from gateway.learning.sampler import ShadowSampler, Tap
from gateway.learning.shadow import ShadowCounters, judge_pair, judgeable
from gateway.types import Outcome
from policies.feedback_spec import FeedbackConfig
from policies.schema import GatewayConfig
from policies.stores.feedback import FeedbackStore, Label, RequestRecord
from policies.stores.store import StoreUnavailable
from policies.tenants import Principal
from routers.tier_quality import ServedQuality, TierQuality

log = logging.getLogger(__name__)


class Feedback:
    def __init__(
        self,
        store: FeedbackStore,
        judge: Judge,
        desk: OperatorDesk,
        base: TierQuality | None,
        replica: str,
    ) -> None:
        self.store = store
        self.judge = judge
        self.desk = desk
        self.sampler = ShadowSampler()
        self.records = RecordWriter(store)
        self.refitter = Refitter(store, base, replica)
        self.counters = ShadowCounters()
        self.client_labels = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def quality(self) -> TierQuality | None:
        """The per-tier quality to route by: the serving refit over the base model."""
        return self.refitter.quality

    def served(self) -> ServedQuality | None:
        """``QualitySource``: what routing reads, once per request (gateway/core/route.py)."""
        return self.refitter.current

    def tap(self, view: RoutedView) -> Tap | None:
        spec = view.config.routing.feedback
        return self.sampler.tap(spec, view.ask.requested_model, view.complexity is not None)

    def finished(
        self, view: RoutedView, outcome: Outcome, tap: Tap | None, entry_id: str | None = None
    ) -> None:
        """The request has ended (the client has its answer or has left); ``entry_id``: the
        cache entry a hit came from, which a bad verdict evicts."""
        spec = view.config.routing.feedback
        if spec is None or outcome.status != "ok":
            return
        self.records.add(build_record(view, outcome, entry_id))
        if tap is None or not judgeable(outcome, tap.text) or not self.sampler.admit(spec):
            return
        task = asyncio.ensure_future(self._shadow(view, outcome, tap.text))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _shadow(self, view: RoutedView, outcome: Outcome, text: str) -> None:
        try:
            await judge_pair(self.desk, self.store, self.judge, self.counters, view, outcome, text)
        except Exception:  # a shadow must never take anything down: log it and go on
            log.exception("feedback shadow of %s failed", view.ask.request_id)
        finally:
            self.sampler.release()

    async def record(self, request_id: str) -> RequestRecord | None:
        return self.records.pending(request_id) or await self.store.record(request_id)

    async def client_verdict(
        self, spec: FeedbackConfig, principal: Principal, record: RequestRecord, verdict: str
    ) -> tuple[str | None, Label | None]:
        """Set the record's verdict (once); a live answer's becomes a label of its tier.
        The verdict the record already had (nothing changed then), and the label made."""
        if self.records.pending(record.request_id) is not None:
            await self.records.flush(spec)  # the verdict needs the record in the store
        previous = await self.store.set_verdict(record.request_id, verdict)
        if previous is not None or record.cache not in ("miss", "bypass"):
            return previous, None
        label = Label(
            request_id=record.request_id,
            tier=record.tier,
            acceptable=verdict == "good",
            source="client",
            vector=record.vector,
            features=record.features,
            ts=await self.store.now(),
            tenant=principal.tenant,
            cost_usd=record.cost_usd,
        )
        await self.store.add_label(label, spec.max_labels, spec.label_ttl_days * 86_400)
        self.client_labels += 1
        return None, label

    async def run(self, config: Callable[[], GatewayConfig]) -> None:
        """Write records every ``record_flush_s``; every ``refit.check_s`` follow the
        serving model and refit when due. Runs until cancelled."""
        loop = asyncio.get_running_loop()
        next_check = loop.time()
        while True:
            spec = config().routing.feedback
            if spec is None:
                await asyncio.sleep(1.0)
                continue
            await self.records.flush(spec)
            if loop.time() >= next_check:
                next_check = loop.time() + spec.refit.check_s
                try:
                    await self.refitter.poll()
                    await self.refitter.maybe_refit(spec.refit)
                except StoreUnavailable as exc:
                    log.warning("feedback: the store is unreachable: %s", exc)
            await asyncio.sleep(spec.record_flush_s)

    async def aclose(self, config: GatewayConfig) -> None:
        """Let running shadows finish (bounded), write what is queued."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
        spec = config.routing.feedback
        if spec is not None:
            await self.records.flush(spec)

    def counts(self) -> dict[str, Any]:
        """This replica's counters (the admin API adds the shared ones)."""
        judge: dict[str, int] = {}
        if isinstance(self.judge, ModelJudge):
            judge = {"answered": self.judge.answered, "unparsed": self.judge.unparsed}
        elif isinstance(self.judge, KnownLabelsJudge):
            judge = {"unknown": self.judge.unknown}
        return {
            "sampled": self.sampler.sampled,
            "dropped_busy": self.sampler.dropped,
            "in_flight": self.sampler.in_flight,
            **{f"shadow_{k}": v for k, v in asdict(self.counters).items()},
            "client_labels": self.client_labels,
            "records_written": self.records.written,
            "judge": judge,
            "serving_version": self.refitter.version,
        }
