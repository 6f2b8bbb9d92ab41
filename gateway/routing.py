"""From a parsed request to a ``RoutedRequest``: the tier (classifying ``auto``), the
cache plan and the request's one shared embedding. Nothing here runs a model.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace

from backends.base import GenerationRequest
from gateway.cache.service import CachePlan
from gateway.errors import InvalidRequest, ModelNotFound, PermissionDenied
from gateway.state import GatewayState
from gateway.timing import timed
from policies.tenants import Principal
from routers.batching import BatcherClosed, EmbeddingFailed
from routers.classifier import ComplexityScore
from routers.decision import (
    TierDecision,
    TierNotAllowed,
    UnknownModel,
    UnknownTier,
    decide,
)
from routers.embedding import EmbeddingOnce, last_user_text
from routers.features import prompt_messages

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoutedRequest:
    request_id: str
    created: int
    principal: Principal
    requested_model: str
    decision: TierDecision
    generation: GenerationRequest
    stream: bool
    include_usage: bool
    cache: CachePlan | None = None
    embedding: EmbeddingOnce | None = None  # one per request: cache and classifier share it
    complexity: ComplexityScore | None = None

    @property
    def tier(self) -> str:
        return self.decision.tier


def new_request_id(prefix: str) -> str:
    # 128 random bits, as uuid4 has, without building a UUID object on every request.
    return f"{prefix}-{os.urandom(16).hex()}"


async def _complexity(
    state: GatewayState, embedding: EmbeddingOnce | None, build: GenerationRequest
) -> tuple[ComplexityScore | None, str | None]:
    if state.classifier is None or embedding is None:
        return None, "no classifier loaded"
    messages = build.messages or prompt_messages(build.prompt or "")
    try:
        return await state.classifier.classify(messages, embedding), None
    except (EmbeddingFailed, BatcherClosed) as exc:
        log.warning("classification failed, using the default tier: %s", exc)
        return None, f"classification failed: {exc}"


async def route(
    state: GatewayState,
    principal: Principal,
    requested_model: str,
    build: GenerationRequest,
    *,
    stream: bool,
    include_usage: bool,
    cache_control: str | None = None,
    forced_tier: str | None = None,
) -> RoutedRequest:
    """The tier for this request; ``auto`` awaits the classifier (off the event loop)."""
    embedding = None
    if state.embedder is not None:
        text = last_user_text(build.messages) if build.messages else (build.prompt or "")
        embedding = EmbeddingOnce(state.embedder, text)
    complexity, note = None, None
    if requested_model == "auto" and forced_tier is None:
        with timed("classification"):  # includes the embedding, which it computes first
            complexity, note = await _complexity(state, embedding, build)
    config = state.config
    refusal = principal.model_refusal(requested_model, config)
    if refusal is not None:
        raise PermissionDenied(refusal, param="model")
    score = None if complexity is None else complexity.score
    learned, why = None, "thresholds"
    if state.shares is not None and score is not None and config.routing.target_share:
        learned, why = state.shares.route(
            config.routing, list(config.tiers), score, state.background
        )
    try:
        decision = decide(
            config, principal.policy, requested_model, score, forced_tier, learned, why
        )
    except UnknownModel:
        raise ModelNotFound(
            f"The model `{requested_model}` does not exist or you do not have access to it.",
            param="model",
        ) from None
    except UnknownTier:
        raise InvalidRequest(
            f"x-tiergate-tier names no tier ({', '.join(config.tiers)})", param="x-tiergate-tier"
        ) from None
    except TierNotAllowed as exc:
        raise PermissionDenied(str(exc), param="model") from None
    if note is not None and requested_model == "auto":
        decision = replace(decision, trail=(note, *decision.trail))
    plan = None
    if state.cache is not None:
        plan = state.cache.plan(principal, requested_model, build, cache_control)
    return RoutedRequest(
        request_id=build.request_id,
        created=int(time.time()),
        principal=principal,
        requested_model=requested_model,
        decision=decision,
        generation=replace(build, model=decision.pinned_model or build.model, whole=not stream),
        stream=stream,
        include_usage=include_usage,
        cache=plan,
        embedding=embedding,
        complexity=complexity,
    )
