"""The request's vocabulary: what every stage of the gateway hands the next.

A leaf: it imports nothing of the gateway (``tests/gateway/test_layers.py``), so any
stage may use these types without depending on the stage that made them.

- ``Ask``: a request as a wire format hands it to the serving core (built in one
  place, ``gateway.core.entrance.ask_for``).
- ``RoutedRequest``: the request once its tier is decided (``gateway.core.route``).
- ``Progress``: what a run has seen so far; ``Outcome``: what the request came to,
  computed once when it ends (``gateway.money.outcome.conclude``), from which the
  headers, the metrics, the trace and the ledger event are all written.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from backends.base import GenerationRequest, Priority, Usage
from policies.schema import GatewayConfig
from policies.stores.ledger import SpendEvent, now
from policies.tenants import Principal
from routers.classifier import ComplexityScore
from routers.decision import TierDecision
from routers.embedding import EmbeddingOnce
from routers.escalation import EscalationPlan
from routers.session import SessionHint
from routers.session_policy import SessionTurn
from routers.tier_quality import ServedQuality


@dataclass(frozen=True, slots=True)
class IdShape:
    """How a format's request ids look: ``prefix`` and ``digits`` hex digits (OpenAI's
    ``chatcmpl-`` and 32, as 128 random bits, as uuid4 has; Anthropic's ``msg_`` and 24).
    ``stable(seed)`` is an id of that shape whose digits are a digest of ``seed``, the
    same on every try (a batch line's)."""

    prefix: str
    digits: int = 32

    def new(self) -> str:
        return self.prefix + os.urandom(self.digits // 2).hex()

    def stable(self, seed: str) -> str:
        return self.prefix + hashlib.sha256(seed.encode()).hexdigest()[: self.digits]


@dataclass(frozen=True, slots=True)
class Ask:
    """A request as a wire format hands it to the core: who asks, for which model, the
    engine request, and how the answer is wanted."""

    principal: Principal
    requested_model: str
    generation: GenerationRequest
    stream: bool
    include_usage: bool
    cache_control: str | None = None  # the request's ``Cache-Control`` header
    forced_tier: str | None = None  # the request's ``x-tiergate-tier`` header
    metadata: Mapping[str, str] | None = None  # the client's, for ledger and trace (None, not {})
    priority: Priority = "interactive"  # "batch": a batch line (batch prices, spare slots)
    session: SessionHint | None = None  # what the client says of its conversation

    @property
    def request_id(self) -> str:
        return self.generation.request_id


@dataclass(frozen=True, slots=True)
class RoutedRequest:
    """The request as routing left it: the ``Ask`` it routed, whole (the engine request is
    built from ``ask.generation`` at dispatch; nothing after routing changes it), and what
    routing added to it."""

    config: GatewayConfig  # the snapshot taken at admission, for the whole request
    ask: Ask  # as the guard left it (``gateway.guardrails.screen``)
    created: int
    decision: TierDecision
    embedding: EmbeddingOnce | None = None  # one per request: cache and classifier share it
    complexity: ComplexityScore | None = None
    classify_s: float | None = None  # how long the classification took, when it ran
    quality_model: ServedQuality | None = None  # None: the classifier's own per-tier model
    session: SessionTurn | None = None  # ``auto`` under ``routing.sessions``: its session
    escalation: EscalationPlan | None = None  # the cheaper tier answers first (``auto``)

    @property
    def batch(self) -> bool:
        """A batch line: the pool schedules it in spare slots; it pays batch prices."""
        return self.ask.priority == "batch"

    @property
    def tier(self) -> str:
        return self.decision.tier


class Readiness:
    """Whether this process serves: set once started, cleared at shutdown."""

    __slots__ = ("ready",)

    def __init__(self) -> None:
        self.ready = False


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
    replica: str | None = None  # the engine replica that answered
    # routing.escalation: None (no cheap attempt), "kept" or "escalated"; the cheap
    # answer's signal, and what its attempt cost when it was not the answer.
    escalation: str | None = None
    escalation_signal: float | None = None
    escalation_added_usd: float = 0.0
    escalation_tokens: int = 0


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
    batch: bool = False  # a batch line: charged at the model's batch price
    saved_batch_usd: float = 0.0  # the interactive price of the same answer, minus the cost
    escalation: str | None = None  # None | "kept" | "escalated" (``Progress.escalation``)
    escalation_signal: float | None = None
    escalation_added_usd: float = 0.0  # the cheap attempt's cost, in ``cost_usd``
    escalation_tokens: int = 0  # the re-asked cheap attempt's, for tokens-per-minute

    @property
    def rate_tokens(self) -> int:
        """What tokens-per-minute counts: the answer's tokens and a re-asked attempt's."""
        return self.usage.total_tokens + self.escalation_tokens

    @property
    def attempts(self) -> int:
        """Engine attempts that ran: 2 when a cheap answer was re-asked one tier up."""
        return 2 if self.escalation == "escalated" else 1

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
            batch=self.batch,
            saved_batch_usd=self.saved_batch_usd,
            judged=self.escalation is not None,
            escalated=self.escalation == "escalated",
            attempts=self.attempts,
            escalation_added_usd=self.escalation_added_usd,
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
            batch=self.batch,
        )


def status_of(error: str | None) -> str:
    if error is None:
        return "ok"
    return "cancelled" if error == "cancelled" else "error"
