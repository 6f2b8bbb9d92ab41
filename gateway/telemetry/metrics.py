"""Prometheus metrics on a registry of their own (built in the lifespan, never the global one).

Label values come from the config (tenants, tiers, models, engines) or from small fixed
sets (status, cache result, denial reason), so the series count is bounded by the
config. Series carry no tenant label unless ``metrics.tenant_label: true`` (off by
default: tenant names may be private, and every tenant multiplies the series).

Request series are recorded where a request ends; engine, queue and autoscaling gauges
are read from the engines when ``/metrics`` is scraped.
"""

from __future__ import annotations

import time
from collections import Counter as Counter_
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics import MetricWrapperBase

from backends.pool import EnginePool, Replica
from gateway.telemetry.autoscale import Autoscaler, tier_utilisation
from gateway.telemetry.gc_pauses import GcPauses
from policies.schema import GatewayConfig

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)
TPOT_BUCKETS = (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
GUARD_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25)
CLASSIFIER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)

M = TypeVar("M", bound=MetricWrapperBase)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished request, as the metrics see it."""

    tenant: str
    tier: str
    model: str
    status: str  # ok | error | cancelled
    cache: str  # miss | exact | semantic | bypass
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    saved_routing_usd: float = 0.0
    saved_cache_usd: float = 0.0
    latency_s: float = 0.0
    ttft_s: float | None = None
    endpoint: str = "chat"  # chat | text_completion | embeddings


def prefix_hit_rate(extra: Mapping[str, float]) -> float | None:
    """An engine's prefix-cache hit rate, if it reports one (as a rate or as hits/queries)."""
    if "prefix_cache_hit_rate" in extra:
        return extra["prefix_cache_hit_rate"]
    queries = extra.get("prefix_cache_queries")
    if queries:
        return extra.get("prefix_cache_hits", 0.0) / queries
    return None


class GatewayMetrics:
    def __init__(self, config: GatewayConfig) -> None:
        self.registry = CollectorRegistry()
        # Labelled children by label values: ``labels()`` takes a lock and builds a key
        # on every call; the set is bounded by the config, so keep them.
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}
        self.tenant_label = config.metrics.tenant_label
        self.autoscaler = Autoscaler(config.metrics.autoscale)
        self._latency_signal = config.metrics.autoscale.latency
        self._request_series()
        self._engine_series()
        self._batch_series()
        self._guard_series()
        # Fed by ``gc.callbacks`` while the lifespan serves (``gc_pauses.watching()``).
        self.gc_pauses = GcPauses()
        self.registry.register(self.gc_pauses)

    def _counter(self, name: str, doc: str, labels: Sequence[str]) -> Counter:
        return Counter(name, doc, tuple(labels), registry=self.registry)

    def _gauge(self, name: str, doc: str, labels: Sequence[str]) -> Gauge:
        return Gauge(name, doc, tuple(labels), registry=self.registry)

    def _histogram(
        self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> Histogram:
        return Histogram(name, doc, tuple(labels), buckets=tuple(buckets), registry=self.registry)

    def _request_series(self) -> None:
        """Recorded where a request ends, from its ``Outcome``."""
        t = ("tenant",) if self.tenant_label else ()
        counter, histogram = self._counter, self._histogram
        self.requests = counter(
            "tiergate_requests",
            "Finished requests.",
            (*t, "endpoint", "tier", "model", "status", "cache"),
        )
        self.ttft = histogram(
            "tiergate_time_to_first_token_seconds", "Time to first token.", ("tier",), TTFT_BUCKETS
        )
        self.tpot = histogram(
            "tiergate_time_per_output_token_seconds",
            "Time per output token after the first.",
            ("tier",),
            TPOT_BUCKETS,
        )
        self.latency = histogram(
            "tiergate_request_duration_seconds",
            "End-to-end request latency in the gateway.",
            ("tier", "status"),
            LATENCY_BUCKETS,
        )
        self.tokens = counter("tiergate_tokens", "Tokens in and out.", (*t, "tier", "direction"))
        self.cost = counter("tiergate_cost_usd", "Spend in USD.", (*t, "tier"))
        self.saved = counter(
            "tiergate_saved_usd", "USD saved against the always-large baseline.", (*t, "reason")
        )
        self.denials = counter(
            "tiergate_denials", "Requests refused by budget or rate limit.", (*t, "reason")
        )
        # routing.escalation: cheap answers judged, by result (kept | escalated), under
        # the tier that answered; and what the re-asked cheap attempts cost
        self.escalations = counter(
            "tiergate_escalations", "Cheap answers judged, by result.", (*t, "tier", "result")
        )
        self.escalation_added = counter(
            "tiergate_escalation_added_usd",
            "USD of cheap attempts re-asked one tier up, by the tier that answered.",
            (*t, "tier"),
        )
        self.classifier = histogram(
            "tiergate_classifier_duration_seconds",
            "Complexity classification latency.",
            (),
            CLASSIFIER_BUCKETS,
        )

    def _engine_series(self) -> None:
        """Read from the engines and pools when ``/metrics`` is scraped."""
        gauge = self._gauge
        self.engine_running = gauge("tiergate_engine_running", "Running requests.", ("engine",))
        self.engine_waiting = gauge(
            "tiergate_engine_queue_depth", "Requests waiting in the engine.", ("engine",)
        )
        self.engine_inflight = gauge(
            "tiergate_engine_inflight", "Requests the gateway has in flight.", ("engine",)
        )
        self.engine_batch = gauge(
            "tiergate_engine_batch_inflight", "Of those, batch lines.", ("engine",)
        )
        self.engine_kv = gauge(
            "tiergate_engine_kv_cache_usage_ratio", "KV-cache usage (0-1).", ("engine",)
        )
        self.engine_prefix = gauge(
            "tiergate_engine_prefix_cache_hit_rate", "Prefix-cache hit rate (0-1).", ("engine",)
        )
        self.engine_healthy = gauge("tiergate_engine_healthy", "1 if healthy.", ("engine",))
        self.tier_queue = gauge(
            "tiergate_tier_queue_depth", "Requests waiting for a replica.", ("tier",)
        )
        self.tier_batch_queue = gauge(
            "tiergate_tier_batch_queue_depth", "Batch lines waiting for a replica.", ("tier",)
        )
        self.tier_utilisation = gauge(
            "tiergate_tier_utilisation_ratio", "Tier utilisation (0-1).", ("tier",)
        )
        self.tier_p99 = gauge(
            "tiergate_tier_latency_p99_seconds", "p99 latency over the window.", ("tier",)
        )
        self.tier_replicas = gauge("tiergate_tier_replicas", "Configured replicas.", ("tier",))
        self.recommended = gauge(
            "tiergate_autoscale_recommended_replicas", "Recommended replicas.", ("tier",)
        )
        self.direction = gauge(
            "tiergate_autoscale_direction", "-1 scale down, 0 hold, 1 scale up.", ("tier",)
        )

    def _batch_series(self) -> None:
        """Set by the batch runner (``gateway.batches.runner``) as it works."""
        self.batch_queued = self._gauge(
            "tiergate_batch_lines_queued", "Batch lines in the shared queue, not yet taken.", ()
        )
        self.batch_running = self._gauge(
            "tiergate_batch_lines_running", "Batch lines this replica is running.", ()
        )
        self.batch_lines = self._counter(
            "tiergate_batch_lines", "Batch lines ended, by result.", ("result",)
        )

    def _guard_series(self) -> None:
        """Counted by the guardrails (``gateway.guardrails``): kinds and actions, never values."""
        t = ("tenant",) if self.tenant_label else ()
        self.guard_found = self._counter(
            "tiergate_guardrail_detections",
            "Values the guardrails found, by type, action and side (request or answer).",
            (*t, "type", "action", "side"),
        )
        self.guard_latency = self._histogram(
            "tiergate_guardrail_screen_seconds",
            "How long the guardrail screen of one request took.",
            (),
            GUARD_BUCKETS,
        )
        # the same counts, kept for /admin/api/guardrails (this replica, since its start)
        self.guard_totals: Counter_[tuple[str, str, str, str]] = Counter_()
        self.guard_screens = 0
        self.guard_screen_s = 0.0

    def guarded(
        self,
        tenant: str,
        counts: Mapping[tuple[str, str], int],
        side: str,
        seconds: float | None = None,
    ) -> None:
        """What the guard found on one side of a request (and the screen's time)."""
        t = self._tenant(tenant)
        for (kind, action), count in counts.items():
            self._child(self.guard_found, *t, kind, action, side).inc(count)
            self.guard_totals[(tenant, kind, action, side)] += count
        if seconds is not None:
            self.guard_latency.observe(seconds)
            self.guard_screens += 1
            self.guard_screen_s += seconds

    def batch_line_ended(self, result: str) -> None:
        """``completed``, ``failed``, ``cancelled`` or ``expired``."""
        self._child(self.batch_lines, result).inc()

    def _tenant(self, tenant: str) -> tuple[str, ...]:
        return (tenant,) if self.tenant_label else ()

    def _child(self, metric: M, *labels: str) -> M:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child  # type: ignore[return-value]

    def request_ended(self, record: RequestRecord) -> None:
        t, tier, child = self._tenant(record.tenant), record.tier, self._child
        labels = (record.endpoint, tier, record.model, record.status, record.cache)
        child(self.requests, *t, *labels).inc()
        child(self.latency, tier, record.status).observe(record.latency_s)
        if record.ttft_s is not None:
            child(self.ttft, tier).observe(record.ttft_s)
            if record.completion_tokens > 1:
                decode_s = max(record.latency_s - record.ttft_s, 0.0)
                child(self.tpot, tier).observe(decode_s / (record.completion_tokens - 1))
        for direction, count in (
            ("input", record.prompt_tokens),
            ("cached", record.cached_tokens),
            ("output", record.completion_tokens),
        ):
            if count:
                child(self.tokens, *t, tier, direction).inc(count)
        child(self.cost, *t, tier).inc(record.cost_usd)
        if record.saved_routing_usd > 0:
            child(self.saved, *t, "routing").inc(record.saved_routing_usd)
        if record.saved_cache_usd > 0:
            child(self.saved, *t, "cache").inc(record.saved_cache_usd)
        if record.status == "ok" and record.endpoint != "embeddings":  # no pool to scale
            signal = record.ttft_s if self._latency_signal == "ttft" else record.latency_s
            if signal is not None:
                self.autoscaler.observe(record.tier, signal, time.monotonic())

    def escalation_ended(self, tenant: str, tier: str, result: str, added_usd: float) -> None:
        """A cheap answer was judged: ``kept``, or ``escalated`` at ``added_usd``."""
        t = self._tenant(tenant)
        self._child(self.escalations, *t, tier, result).inc()
        if added_usd > 0:
            self._child(self.escalation_added, *t, tier).inc(added_usd)

    def denied(self, tenant: str, reason: str) -> None:
        """A request refused by a budget (``budget``) or a rate limit (``rate_limit``)."""
        self._child(self.denials, *self._tenant(tenant), reason).inc()

    def classified(self, seconds: float) -> None:
        """Hook for the complexity classifier: how long one classification took."""
        self.classifier.observe(seconds)

    def refresh(
        self, replicas: Mapping[str, Sequence[Replica]], pools: Mapping[str, EnginePool]
    ) -> None:
        """Read engine and queue state into the gauges; called on the loop before a scrape."""
        for group in replicas.values():
            for replica in group:
                name, load = replica.name, replica.engine.load()
                self.engine_running.labels(name).set(load.running)
                self.engine_waiting.labels(name).set(load.waiting)
                self.engine_inflight.labels(name).set(replica.inflight)
                self.engine_batch.labels(name).set(replica.batch_inflight)
                self.engine_kv.labels(name).set(load.kv_usage)
                self.engine_healthy.labels(name).set(1.0 if load.healthy else 0.0)
                rate = prefix_hit_rate(replica.engine.counters.extra)
                if rate is not None:
                    self.engine_prefix.labels(name).set(rate)
        now = time.monotonic()
        for tier, pool in pools.items():
            advice = self.autoscaler.advise(tier, len(pool.replicas), tier_utilisation(pool), now)
            self.tier_queue.labels(tier).set(pool.waiting)
            self.tier_batch_queue.labels(tier).set(pool.batch_waiting)
            self.tier_utilisation.labels(tier).set(advice.utilisation)
            self.tier_p99.labels(tier).set(advice.p99_s)
            self.tier_replicas.labels(tier).set(advice.current)
            self.recommended.labels(tier).set(advice.recommended)
            self.direction.labels(tier).set(advice.direction)

    def render(self) -> bytes:
        return generate_latest(self.registry)
