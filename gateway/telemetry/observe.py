"""Where a request ends: one call writes its ``Outcome`` to the metrics (requests,
denials, classifier latency) and finishes its trace spans.

Attribute names follow the OpenTelemetry GenAI semantic conventions, plus ``tiergate.*``
for what is ours (tier, complexity, cache result, tenant, cost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from gateway.telemetry.metrics import GatewayMetrics, RequestRecord
from gateway.telemetry.tracing import RequestTrace
from gateway.types import Outcome

if TYPE_CHECKING:
    from gateway.types import RoutedRequest


def operation(routed: RoutedRequest) -> str:
    return "chat" if routed.ask.generation.messages is not None else "text_completion"


def request_attributes(routed: RoutedRequest) -> dict[str, AttributeValue]:
    ask = routed.ask
    sampling = ask.generation.sampling
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": operation(routed),
        "gen_ai.request.model": ask.requested_model,
        "gen_ai.response.id": ask.request_id,
        "tiergate.tenant": ask.principal.tenant,
        "tiergate.tier": routed.tier,
    }
    if routed.decision.score is not None:
        attributes["tiergate.complexity"] = routed.decision.score
    if routed.batch:
        attributes["tiergate.priority"] = ask.priority
    for key, tag in (ask.metadata or {}).items():  # the client's annotation
        attributes[f"tiergate.metadata.{key}"] = tag
    for name, value in (
        ("gen_ai.request.max_tokens", sampling.max_tokens),
        ("gen_ai.request.temperature", sampling.temperature),
        ("gen_ai.request.top_p", sampling.top_p),
        ("gen_ai.request.seed", sampling.seed),
    ):
        if value is not None:
            attributes[name] = value
    return attributes


def begin(trace: RequestTrace, routed: RoutedRequest) -> None:
    """The request is routed: name the root span as GenAI spans are named, tag it."""
    if not trace.recording:
        return
    attributes = request_attributes(routed)
    trace.rename(f"{operation(routed)} {routed.ask.requested_model}")
    trace.set(attributes)


def record(metrics: GatewayMetrics, tenant: str, outcome: Outcome, endpoint: str = "chat") -> None:
    """The metrics of one finished request: its series, a denial, the classifier's time."""
    usage = outcome.usage
    metrics.request_ended(
        RequestRecord(
            endpoint=endpoint,
            tenant=tenant,
            tier=outcome.tier,
            model=outcome.model,
            status=outcome.status,
            cache=outcome.cache,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            cost_usd=outcome.cost_usd,
            saved_routing_usd=outcome.saved_routing_usd,
            saved_cache_usd=outcome.saved_cache_usd,
            latency_s=outcome.latency_s,
            ttft_s=outcome.ttft_s,
        )
    )
    if outcome.denied is not None:
        metrics.denied(tenant, outcome.denied)
    if outcome.escalation is not None:
        metrics.escalation_ended(
            tenant, outcome.tier, outcome.escalation, outcome.escalation_added_usd
        )
    if outcome.classify_s is not None:
        metrics.classified(outcome.classify_s)


def finish(
    metrics: GatewayMetrics,
    trace: RequestTrace,
    generation: Span,
    routed: RoutedRequest,
    outcome: Outcome,
) -> None:
    """Record the finished request (metrics) and close its generation span."""
    record(metrics, routed.ask.principal.tenant, outcome, operation(routed))
    usage, status = outcome.usage, outcome.status
    if not trace.recording:
        return
    attributes: dict[str, AttributeValue] = {
        **request_attributes(routed),
        "gen_ai.response.model": outcome.model,
        "tiergate.tier": outcome.tier,
        "tiergate.cache": outcome.cache,
        "tiergate.cost_usd": outcome.cost_usd,
        "tiergate.status": status,
        "tiergate.tier_trail": outcome.trail,
    }
    if outcome.dispatched or outcome.cache in ("exact", "semantic"):
        attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
    if outcome.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (outcome.finish_reason,)
    if outcome.failover_from is not None:
        attributes["tiergate.failover_from"] = outcome.failover_from
    if outcome.denied is not None:
        attributes["tiergate.denied"] = outcome.denied
    if outcome.ttft_s is not None:
        attributes["tiergate.ttft_s"] = outcome.ttft_s
    if outcome.escalation is not None:
        attributes["tiergate.escalation"] = outcome.escalation
        attributes["tiergate.attempts"] = outcome.attempts
        attributes["tiergate.escalation_added_usd"] = outcome.escalation_added_usd
        if outcome.escalation_signal is not None:
            attributes["tiergate.escalation_signal"] = outcome.escalation_signal
    generation.set_attributes(attributes)
    if outcome.error is not None:
        generation.set_status(Status(StatusCode.ERROR, outcome.error))
        generation.set_attribute("error.type", status)
    generation.end()
    trace.set(attributes)


def embedded(
    metrics: GatewayMetrics, trace: RequestTrace, tenant: str, request_id: str, outcome: Outcome
) -> None:
    """An embeddings request has ended: its metrics (endpoint ``embeddings``), its trace."""
    record(metrics, tenant, outcome, "embeddings")
    if not trace.recording:
        return
    trace.rename(f"embeddings {outcome.model}")
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "embeddings",
        "gen_ai.request.model": outcome.model,
        "gen_ai.response.id": request_id,
        "gen_ai.usage.input_tokens": outcome.usage.prompt_tokens,
        "tiergate.tenant": tenant,
        "tiergate.cost_usd": outcome.cost_usd,
        "tiergate.status": outcome.status,
    }
    if outcome.denied is not None:
        attributes["tiergate.denied"] = outcome.denied
    trace.set(attributes)
