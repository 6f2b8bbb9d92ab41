"""From a parsed request to a ``RoutedRequest``: the tier (classifying ``auto``), the
cache plan and the request's one shared embedding. Nothing here runs a model.

The config is the snapshot the request took at admission; it travels in the
``RoutedRequest`` and nothing after routing reads ``state.config``. The exact cache is
looked up before classification (its key does not depend on the tier): a hit skips it.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace

from backends.base import GenerationRequest
from gateway.cache.service import CachePlan, Lookup
from gateway.capabilities import fit_tier
from gateway.errors import InvalidRequest, ModelNotFound, PermissionDenied
from gateway.state import GatewayState
from gateway.timing import timed
from policies.schema import GatewayConfig
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
from routers.features import message_text, prompt_messages
from routers.objective import TierChoice

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoutedRequest:
    config: GatewayConfig  # the snapshot taken at admission, for the whole request
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
    classify_s: float | None = None  # how long the classification took, when it ran
    exact: Lookup | None = None  # the exact-cache lookup, when it was made before routing

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
    config: GatewayConfig | None = None,
    exact_first: bool = False,
    observe: bool = True,
) -> RoutedRequest:
    """The tier for this request; ``auto`` awaits the classifier (off the event loop).

    ``config`` is the request's snapshot (``state.config`` read now when not given);
    ``exact_first`` looks the exact cache up first, and a hit skips classification;
    ``observe`` False: the score does not join the target-share sketch (``/v1/route``)."""
    config = state.config if config is None else config
    embedding = None
    if state.embedder is not None:
        text = last_user_text(build.messages) if build.messages else (build.prompt or "")
        embedding = EmbeddingOnce(state.embedder, text)
    plan, exact = await _cache_first(
        state, principal, requested_model, build, cache_control, exact_first
    )
    complexity, note, classify_s = None, None, None
    if exact is not None and exact.response is not None:
        note = "exact cache hit: classification skipped"
    elif requested_model == "auto" and forced_tier is None:
        started = time.perf_counter()
        with timed("classification"):  # includes the embedding, which it computes first
            complexity, note = await _complexity(state, embedding, build)
        if complexity is not None:
            classify_s = time.perf_counter() - started
    learned: tuple[tuple[float, float] | None, str] = (None, "thresholds")
    choice = None
    if config.routing.objective is not None and complexity is not None:
        choice = _objective_choice(state, config, complexity, build, observe)
    elif state.shares is not None and complexity is not None and config.routing.target_share:
        shares, tiers = state.shares, list(config.tiers)
        learned = (
            shares.route(config.routing, tiers, complexity.score, state.background)
            if observe
            else shares.thresholds(config.routing, tiers, state.background)
        )
    decision = _decide(config, principal, requested_model, complexity, forced_tier, learned, choice)
    if note is not None and requested_model == "auto":
        decision = replace(decision, trail=(note, *decision.trail))
    decision = fit_tier(state, principal, decision, build)  # a tier able to serve it
    return RoutedRequest(
        config=config,
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
        classify_s=classify_s,
        exact=exact,
    )


async def _cache_first(
    state: GatewayState,
    principal: Principal,
    requested_model: str,
    build: GenerationRequest,
    cache_control: str | None,
    exact_first: bool,
) -> tuple[CachePlan | None, Lookup | None]:
    """The cache plan, and the exact lookup when it is to come first."""
    if state.cache is None:
        return None, None
    plan = state.cache.plan(principal, requested_model, build, cache_control)
    if not exact_first or plan is None or not plan.lookup:
        return plan, None
    with timed("cache.exact"):
        return plan, await state.cache.lookup_exact(plan)


def _objective_choice(
    state: GatewayState,
    config: GatewayConfig,
    complexity: ComplexityScore,
    build: GenerationRequest,
    observe: bool,
) -> TierChoice | None:
    """``routing.objective``'s tier for this request (None: no per-tier predictions)."""
    if state.objective is None or complexity.quality is None:
        return None
    messages = build.messages or prompt_messages(build.prompt or "")
    chars = sum(len(message_text(m)) for m in messages)
    return state.objective.choose(config, complexity.quality, chars, state.background, observe)


def _decide(
    config: GatewayConfig,
    principal: Principal,
    requested_model: str,
    complexity: ComplexityScore | None,
    forced_tier: str | None,
    learned: tuple[tuple[float, float] | None, str] = (None, "thresholds"),
    choice: TierChoice | None = None,
) -> TierDecision:
    refusal = principal.model_refusal(requested_model, config)  # the key's model scope
    if refusal is not None:
        raise PermissionDenied(refusal, param="model")
    score = None if complexity is None else complexity.score
    try:
        return decide(
            config, principal.policy, requested_model, score, forced_tier, *learned, choice
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
