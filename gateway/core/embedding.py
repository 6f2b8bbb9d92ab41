"""One embeddings call on the serving core (``ServingCore.embed``): check, admit, embed,
settle, for every caller (the ``/v1/embeddings`` endpoint, a batch line).

The same lifecycle as a generation, minus routing: the key's model scope, then the rate
limits and one budget reservation (the request's ``Hold``; the worst case is the input
tokens at the model's input price, there are no output tokens), then the vectors
(the in-process MiniLM the classifier shares, or a remote engine), then one ``Outcome``
from which the metrics, the trace and the ledger event are written, and the settlement.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from backends.base import EmbeddingEngine, Usage
from backends.errors import EngineError
from backends.pool import Replica
from gateway.core.entrance import Options
from gateway.errors import (
    ApiError,
    InvalidRequest,
    ModelNotFound,
    PermissionDenied,
    ServiceUnavailable,
    from_engine_error,
)
from gateway.guardrails.policy import policy_for
from gateway.guardrails.values import guard_value
from gateway.money.hold import Hold, Money, refusal
from gateway.money.outcome import EMBEDDINGS, embedding_outcome
from gateway.money.spend import WorstCase, model_cost, text_upper_tokens
from gateway.telemetry import observe
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.tracing import current_trace
from gateway.types import Outcome
from gateway.wire.embeddings import EMBEDDING_IDS, EmbeddingRequest, embeddings_body
from policies.embedding_spec import EmbeddingSpec
from policies.schema import GatewayConfig
from policies.tenants import Principal
from routers.batching import BatcherClosed, EmbeddingFailed
from routers.wordpiece import ServedEmbedder

log = logging.getLogger(__name__)


class Embedders(Protocol):
    """What a call runs on: the core's collaborators (``Collaborators`` is one)."""

    @property
    def replicas(self) -> Mapping[str, Sequence[Replica]]: ...
    @property
    def served_embedder(self) -> ServedEmbedder | None: ...
    @property
    def money(self) -> Money: ...
    @property
    def metrics(self) -> GatewayMetrics: ...


@dataclass(frozen=True, slots=True)
class EmbeddingCall:
    config: GatewayConfig  # the snapshot taken at admission
    request_id: str
    principal: Principal
    model: str
    spec: EmbeddingSpec
    metadata: Mapping[str, str] | None = None  # embeddings take none; for the ledger
    batch: bool = False  # a batch line: the model's batch price


@dataclass(frozen=True, slots=True)
class Prepared:
    """What runs: the texts for the local model (None: remote), and the input tokens the
    reservation holds (exact for the local model, an upper bound for a remote one)."""

    texts: list[str] | None
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class Embedded:
    """A call's answer: its body, its ``Outcome`` (what it cost, its usage) and the
    response headers the HTTP endpoint sends with it."""

    body: dict[str, Any]
    outcome: Outcome
    headers: dict[str, str]


def _call(
    config: GatewayConfig, principal: Principal, model: str, options: Options
) -> EmbeddingCall:
    spec = config.embeddings.get(model)
    if spec is None:
        raise ModelNotFound(
            f"The embedding model `{model}` does not exist or you do not have access to it "
            f"(embedding models: {', '.join(sorted(config.embeddings)) or 'none'}).",
            param="model",
        )
    refusal = principal.model_refusal(model, config)
    if refusal is not None:
        raise PermissionDenied(refusal, param="model")
    request_id = options.request_id or EMBEDDING_IDS.new()
    batch = options.priority == "batch"
    return EmbeddingCall(config, request_id, principal, model, spec, batch=batch)


async def _prepare_local(served: ServedEmbedder, model: str, body: EmbeddingRequest) -> Prepared:
    """400 for what the in-process model cannot honour; nothing is truncated."""
    extra = body.passthrough()
    if extra:
        name = sorted(extra)[0]
        raise InvalidRequest(f"{name} is not supported by {model}", param=name)
    if body.dimensions is not None:
        raise InvalidRequest(
            f"{model} does not support dimensions (its vectors have {served.embedder.dim})",
            param="dimensions",
        )
    texts = body.texts()
    if texts is None:
        arrays = body.token_arrays()
        vocab = served.wordpieces.vocab_size
        for i, ids in enumerate(arrays):
            if max(ids) >= vocab:
                raise InvalidRequest(
                    f"input[{i}]: token id {max(ids)} is outside {model}'s vocabulary "
                    f"(ids are WordPiece ids below {vocab})",
                    param="input",
                )
        texts = await served.wordpieces.decode(arrays)
    counts = await served.wordpieces.count(texts)
    for i, count in enumerate(counts):
        if count > served.window:
            raise InvalidRequest(
                f"input[{i}] is {count} tokens; {model} reads at most {served.window} "
                "(shorten or split it)",
                param="input",
                code="context_length_exceeded",
            )
    return Prepared(texts, sum(counts))


def _remote_upper(config: GatewayConfig, body: EmbeddingRequest) -> int:
    """Never fewer tokens than the upstream can count: bytes per token as for prompts."""
    texts = body.texts()
    if texts is None:
        return sum(len(ids) for ids in body.token_arrays())
    budgets = config.budgets
    return sum(
        text_upper_tokens(config, len(t.encode())) + budgets.prompt_overhead_tokens for t in texts
    )


class EmbeddingRun:
    """The vectors of one call behind its ``hold`` (admission, settlement)."""

    def __init__(
        self, call: EmbeddingCall, prepared: Prepared, money: Money, metrics: GatewayMetrics
    ) -> None:
        self.call, self.prepared, self.metrics = call, prepared, metrics
        self.outcome: Outcome | None = None
        self.started = time.perf_counter()
        self.trace = current_trace()
        tokens = prepared.prompt_tokens
        usd = model_cost(call.config, call.model, Usage(tokens, 0), call.batch)
        worst = [WorstCase(EMBEDDINGS, usd, tokens, 0)]
        self.hold = Hold(money, call.config, call, worst, tokens)

    async def open(self) -> None:
        """Admit (rate limits, the reservation); a refusal is the call's outcome."""
        try:
            await self.hold.open()
        except ApiError as exc:
            self.end(Usage(0, 0), *refusal(exc))
            raise

    async def close(self) -> None:
        """Settle what the call came to (a call that never ended was cancelled)."""
        await self.hold.close(self.end(Usage(0, 0), "cancelled"))

    async def local(self, served: ServedEmbedder, body: EmbeddingRequest) -> dict[str, Any]:
        assert self.prepared.texts is not None
        try:
            vectors = await served.embedder.embed(self.prepared.texts)
        except (EmbeddingFailed, BatcherClosed) as exc:
            self.end(Usage(0, 0), str(exc))
            raise ServiceUnavailable(
                "the embedder failed; try again shortly", headers={"Retry-After": "1"}
            ) from exc
        tokens = self.prepared.prompt_tokens
        self.end(Usage(tokens, 0), None)
        return embeddings_body(self.call.model, vectors, body.encoding_format, tokens)

    async def remote(self, engine: EmbeddingEngine, body: EmbeddingRequest) -> dict[str, Any]:
        try:
            answer = await engine.embed(body.upstream_body())
        except EngineError as exc:
            self.end(Usage(0, 0), str(exc))
            raise from_engine_error(exc) from exc
        reported = answer.get("usage") or {}
        upper = self.prepared.prompt_tokens
        prompt = reported.get("prompt_tokens") if isinstance(reported, dict) else None
        # Charged: the upstream's count, never more than the reservation held.
        tokens = min(prompt, upper) if isinstance(prompt, int) and prompt >= 0 else upper
        self.end(Usage(tokens, 0), None)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": answer["data"], "model": self.call.model, "usage": usage}

    def end(self, usage: Usage, error: str | None, denied: str | None = None) -> Outcome:
        if self.outcome is None:
            latency_s = time.perf_counter() - self.started
            config, model = self.call.config, self.call.model
            self.outcome = embedding_outcome(
                config,
                model,
                usage,
                error=error,
                denied=denied,
                latency_s=latency_s,
                batch=self.call.batch,
            )
            tenant, request_id = self.call.principal.tenant, self.call.request_id
            observe.embedded(self.metrics, self.trace, tenant, request_id, self.outcome)
        return self.outcome


def _remote_engine(replicas: Mapping[str, Sequence[Replica]], engine: str) -> EmbeddingEngine:
    found = replicas.get(engine) or []
    if not found:
        raise ServiceUnavailable(f"no replica of {engine} is running", headers={"Retry-After": "2"})
    chosen = min(found, key=lambda r: r.inflight).engine
    assert isinstance(chosen, EmbeddingEngine), "check-config allows only embedding backends"
    return chosen


def _source(parts: Embedders, call: EmbeddingCall) -> ServedEmbedder | EmbeddingEngine:
    """The in-process embedder or the remote engine that serves ``call.model``."""
    if call.spec.engine is not None:
        return _remote_engine(parts.replicas, call.spec.engine)
    served = parts.served_embedder
    if served is None:
        raise ModelNotFound(
            f"The embedding model `{call.model}` is not loaded in this process "
            "(the classifier's embedder did not start; the gateway log says why).",
            param="model",
        )
    return served


def _guarded(
    metrics: GatewayMetrics, principal: Principal, body: EmbeddingRequest, *, remote: bool
) -> EmbeddingRequest:
    """The inputs (and ``user``) as the caller's ``guardrails:`` leaves them: embedded
    redacted, a ``block`` a 400; ``local`` may use the in-process embedder only."""
    if policy_for(principal) is None:
        return body
    if body.texts() is None:
        raise InvalidRequest(
            "guardrails: token-id inputs cannot be checked for what this key's guardrails "
            "look for; send the text",
            param="input",
        )
    fields = {"input": body.input, "user": body.user}
    guarded = guard_value(principal, fields, "embeddings", remote=remote, metrics=metrics)
    return body.model_copy(update=guarded)


async def embed(
    config: GatewayConfig,
    parts: Embedders,
    principal: Principal,
    body: EmbeddingRequest,
    options: Options,
) -> Embedded:
    """The call's answer by ``config`` (the core's snapshot) on ``parts``; raises an
    ``ApiError`` for every refusal. Of the ``options``, an embedding honours two: a batch
    line's ``priority`` (batch prices) and its ``request_id`` (the same on every try: it
    is charged once); it has no cache, no tier and no session."""
    call = _call(config, principal, body.model, options)
    source = _source(parts, call)
    remote = not isinstance(source, ServedEmbedder)
    body = _guarded(parts.metrics, principal, body, remote=remote)
    if isinstance(source, ServedEmbedder):
        prepared = await _prepare_local(source, call.model, body)
    else:
        prepared = Prepared(None, _remote_upper(config, body))
    run = EmbeddingRun(call, prepared, parts.money, parts.metrics)
    try:
        await run.open()
        if isinstance(source, ServedEmbedder):
            payload = await run.local(source, body)
        else:
            payload = await run.remote(source, body)
    finally:
        await run.close()
    assert run.outcome is not None and run.hold.ticket is not None
    headers = {
        "x-request-id": call.request_id,
        "x-tiergate-tier": EMBEDDINGS,
        "x-tiergate-model": call.model,
        "x-tiergate-cache": "bypass",
        "x-tiergate-cost-usd": f"{run.outcome.cost_usd:.8f}",
        **dict(run.hold.headers),
    }
    return Embedded(payload, run.outcome, headers)
