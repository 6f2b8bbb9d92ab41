"""What one request came to, computed once when it ends.

``conclude`` turns the run's ``Progress`` (``gateway.types``) into the frozen ``Outcome``:
the usage to charge (the engine's, or a count that never undercounts what the
reservation assumed), the cost, the savings. The response headers, the metrics, the
trace and the ledger event are all written from that one ``Outcome``, so they agree for
every ending.
"""

from __future__ import annotations

from backends.base import Usage
from gateway.money.spend import batch_rate, model_cost, text_upper_tokens
from gateway.types import Charges, Outcome, Progress, status_of
from policies.savings import routing_saving
from policies.schema import GatewayConfig


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
    batch: bool = False,
) -> Outcome:
    """A batch line pays its model's batch share of the interactive price (``cost``);
    routing and cache savings stay at interactive prices, the rest is ``saved_batch``."""
    usage = charged_usage(config, progress, charges)
    tokens = (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    if progress.hit_cost_usd is not None:
        # A hit costs ``hit_charge`` of what the stored answer cost; routing saved what
        # that answer saved when it was generated, the cache the rest.
        listed = progress.hit_cost_usd * charges.hit_charge
        saved_cache = progress.hit_cost_usd - listed
        saved_routing = routing_saving(config, progress.hit_cost_usd, *tokens)
    else:
        # an escalated answer's cost includes the cheap attempt it replaced
        listed = model_cost(config, progress.model, usage) + progress.escalation_added_usd
        saved_cache = 0.0
        saved_routing = routing_saving(config, listed, *tokens) if usage.total_tokens else 0.0
    cost = listed * batch_rate(config, progress.model) if batch else listed
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
        batch=batch,
        saved_batch_usd=listed - cost,
        escalation=progress.escalation,
        escalation_signal=progress.escalation_signal,
        escalation_added_usd=progress.escalation_added_usd,
        escalation_tokens=progress.escalation_tokens,
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
    batch: bool = False,
) -> Outcome:
    """An embeddings request's ``Outcome``: input tokens only, no cache, no routing (a
    batch line at the model's batch price)."""
    listed = model_cost(config, model, usage)
    cost = model_cost(config, model, usage, batch)
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
        cost_usd=cost,
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
        batch=batch,
        saved_batch_usd=listed - cost,
    )
