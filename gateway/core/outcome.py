"""What one request came to, computed once when it ends.

``Progress`` is what the run has seen so far (tier, model, chunks, the engine's usage);
``conclude`` turns it into the frozen ``Outcome``: the usage to charge (the engine's,
or a count that never undercounts what the reservation assumed), the cost, the
savings. The response headers, the metrics, the trace and the ledger event are all
written from that one ``Outcome``, so they agree for every ending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from backends.base import Usage
from gateway.money.spend import model_cost, text_upper_tokens
from policies.ledger import SpendEvent, now
from policies.savings import routing_saving
from policies.schema import GatewayConfig
from policies.tenants import Principal


@dataclass(slots=True)
class Progress:
    """What the run has seen so far; the live view for headers sent before the end."""

    tier: str
    model: str
    trail: tuple[str, ...]
    cache: str = "bypass"
    similarity: float | None = None  # of a semantic hit
    failover_from: str | None = None
    downgraded_from: str | None = None
    dispatched: bool = False  # an engine accepted it (even if it then failed)
    streamed_chunks: int = 0
    streamed_bytes: int = 0
    first_chunk_s: float | None = None  # since the start, the first chunk of any kind
    first_token_s: float | None = None  # since the start, the first text or tool call
    usage: Usage | None = None  # as the engine (or the cached answer) reported it
    finish_reason: str | None = None
    hit_cost_usd: float | None = None  # what a cached answer cost when it was generated
    cache_entry: str | None = None  # the entry a hit came from (``Lookup.entry_id``)
    run_cap: int = 0  # the max_tokens the engine request ran with


@dataclass(frozen=True, slots=True)
class Charges:
    """What admission fixed for charging: the prompt it reserved for, the hit charge."""

    prompt_upper: int
    hit_charge: float


@dataclass(frozen=True, slots=True)
class Outcome:
    tier: str
    model: str
    status: str  # ok | error | cancelled
    error: str | None
    denied: str | None  # budget | rate_limit, when admission refused it
    cache: str  # miss | exact | semantic | bypass
    similarity: float | None
    usage: Usage  # what is charged
    usage_reported: bool
    finish_reason: str | None
    cost_usd: float
    saved_routing_usd: float
    saved_cache_usd: float
    trail: tuple[str, ...]
    failover_from: str | None
    downgraded_from: str | None
    latency_s: float
    ttft_s: float | None  # to the first chunk the client received
    first_token_s: float | None  # to the first text or tool call (the ledger's ttft)
    classify_s: float | None
    dispatched: bool

    def ledger_event(
        self,
        request_id: str,
        principal: Principal,
        downgraded: bool,
        metadata: Mapping[str, str] | None = None,
    ) -> SpendEvent:
        """The spend event the ledger keeps of this request (with the client's
        ``metadata``)."""
        usage = self.usage
        return SpendEvent(
            ts=now(),
            request_id=request_id,
            tenant=principal.tenant,
            key_id=principal.key_id,
            tier=self.tier,
            model=self.model,
            status=self.status,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cached_tokens,
            completion_tokens=usage.completion_tokens,
            cost_usd=self.cost_usd,
            saved_routing_usd=self.saved_routing_usd,
            saved_cache_usd=self.saved_cache_usd,
            cache=self.cache,
            latency_ms=self.latency_s * 1000,
            ttft_ms=(self.first_token_s or self.latency_s) * 1000,
            downgraded=downgraded,
            metadata=metadata,
        )

    def denial_event(
        self, request_id: str, principal: Principal, metadata: Mapping[str, str] | None = None
    ) -> SpendEvent:
        """A refused request's event (``kind="denied"``, the reason as its status)."""
        return SpendEvent(
            ts=now(),
            request_id=request_id,
            tenant=principal.tenant,
            key_id=principal.key_id,
            tier=self.tier,
            model=self.model,
            kind="denied",
            status=self.denied or "refused",
            metadata=metadata,
        )


def status_of(error: str | None) -> str:
    if error is None:
        return "ok"
    return "cancelled" if error == "cancelled" else "error"


def charged_usage(config: GatewayConfig, progress: Progress, charges: Charges) -> Usage:
    """The engine's usage; without one, the prompt count the reservation assumed, and for
    the completion: an answer that finished, the upper count of its text by the same
    bytes-per-token rule; one cut short, the chunks it streamed (one token each, what the
    engine is known to have produced). Never more than the engine was allowed."""
    if progress.usage is not None:
        return progress.usage
    if not progress.dispatched:
        return Usage(0, 0)
    streamed = progress.streamed_chunks
    if progress.finish_reason is not None:
        streamed = max(streamed, text_upper_tokens(config, progress.streamed_bytes))
    return Usage(charges.prompt_upper, min(streamed, progress.run_cap))


def conclude(
    config: GatewayConfig,
    progress: Progress,
    charges: Charges,
    *,
    error: str | None,
    denied: str | None,
    latency_s: float,
    classify_s: float | None,
) -> Outcome:
    usage = charged_usage(config, progress, charges)
    tokens = (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    if progress.hit_cost_usd is not None:
        # A hit costs ``hit_charge`` of what the stored answer cost; routing saved what
        # that answer saved when it was generated, the cache the rest.
        cost = progress.hit_cost_usd * charges.hit_charge
        saved_cache = progress.hit_cost_usd - cost
        saved_routing = routing_saving(config, progress.hit_cost_usd, *tokens)
    else:
        cost = model_cost(config, progress.model, usage)
        saved_cache = 0.0
        saved_routing = routing_saving(config, cost, *tokens) if usage.total_tokens else 0.0
    return Outcome(
        tier=progress.tier,
        model=progress.model,
        status=status_of(error),
        error=error,
        denied=denied,
        cache=progress.cache,
        similarity=progress.similarity,
        usage=usage,
        usage_reported=progress.usage is not None,
        finish_reason=progress.finish_reason,
        cost_usd=cost,
        saved_routing_usd=saved_routing,
        saved_cache_usd=saved_cache,
        trail=progress.trail,
        failover_from=progress.failover_from,
        downgraded_from=progress.downgraded_from,
        latency_s=latency_s,
        ttft_s=progress.first_chunk_s,
        first_token_s=progress.first_token_s,
        classify_s=classify_s,
        dispatched=progress.dispatched,
    )


EMBEDDINGS = "embeddings"  # the tier label of ``/v1/embeddings`` requests (no tier routes them)


def embedding_outcome(
    config: GatewayConfig,
    model: str,
    usage: Usage,
    *,
    error: str | None,
    denied: str | None,
    latency_s: float,
) -> Outcome:
    """An embeddings request's ``Outcome``: input tokens only, no cache, no routing."""
    return Outcome(
        tier=EMBEDDINGS,
        model=model,
        status=status_of(error),
        error=error,
        denied=denied,
        cache="bypass",
        similarity=None,
        usage=usage,
        usage_reported=error is None,
        finish_reason=None,
        cost_usd=model_cost(config, model, usage),
        saved_routing_usd=0.0,
        saved_cache_usd=0.0,
        trail=(),
        failover_from=None,
        downgraded_from=None,
        latency_s=latency_s,
        ttft_s=None,
        first_token_s=None,
        classify_s=None,
        dispatched=usage.prompt_tokens > 0,
    )
