"""From an ``Ask`` to a ``RoutedRequest``: the tier (classifying ``auto``) and the
request's one shared embedding. Nothing here runs a model or looks at the cache.

The config is the snapshot the request took at admission; it travels in the
``RoutedRequest`` and nothing after routing reads another. The serving core asks the
cache first (``gateway.core.serving_core``); a request the cache answers is routed without
classifying it (``cached``). The call to the router is ``_tier``: the score and per-tier predictions
(``_complexity``), the objective's choice or the learned thresholds, then ``_decide``.
The per-tier model is read once per request, as the config is: with ``routing.feedback``
the refit that serves (``Router.quality``, the feedback loop), else the classifier's own;
a refit swapped in mid-request does not reach it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from backends.base import GenerationRequest
from gateway.core.capabilities import demands, fit_tier, shortfall, tier_support
from gateway.errors import InvalidRequest, ModelNotFound, PermissionDenied
from gateway.telemetry.timing import timed
from gateway.types import Ask, RoutedRequest
from policies.schema import GatewayConfig
from policies.tenants import Principal
from routers.batching import BatcherClosed, EmbeddingFailed
from routers.classifier import Classifier, ComplexityScore
from routers.decision import (
    TierDecision,
    TierNotAllowed,
    UnknownModel,
    UnknownTier,
    decide,
    permitted_tiers,
)
from routers.embedding import EmbeddingOnce, last_user_text
from routers.escalation import EscalationPlan, plan_escalation
from routers.features import message_text, prompt_messages
from routers.objective import TierChoice
from routers.router import Router, served_quality
from routers.session_policy import SessionTurn
from routers.session_route import SessionPlan, plan_session, record_session, session_turn
from routers.tier_quality import ServedQuality

log = logging.getLogger(__name__)


async def _complexity(
    classifier: Classifier | None,
    embedding: EmbeddingOnce | None,
    build: GenerationRequest,
    served: ServedQuality | None,
) -> tuple[ComplexityScore | None, str | None]:
    if classifier is None or embedding is None:
        return None, "no classifier loaded"
    messages = build.messages or prompt_messages(build.prompt or "")
    quality = None if served is None else served.quality
    try:
        return await classifier.classify(messages, embedding, quality), None
    except (EmbeddingFailed, BatcherClosed) as exc:
        log.warning("classification failed, using the default tier: %s", exc)
        return None, f"classification failed: {exc}"


def embedding_of(router: Router, build: GenerationRequest) -> EmbeddingOnce | None:
    """The request's one embedding (computed on first use): the last user message, or
    the prompt. The classifier and the semantic cache share it."""
    if router.embedder is None:
        return None
    text = last_user_text(build.messages) if build.messages else (build.prompt or "")
    return EmbeddingOnce(router.embedder, text)


async def route(
    config: GatewayConfig,
    router: Router,
    ask: Ask,
    embedding: EmbeddingOnce | None,
    *,
    cached: bool = False,
    explain: bool = False,
) -> RoutedRequest:
    """The tier for this request on the ``config`` snapshot; ``auto`` awaits the
    classifier (off the event loop) unless the cache already has the answer
    (``cached``). ``explain`` (``/v1/route``): the score stays out of the target-share
    sketch (an explanation is not traffic)."""
    build = ask.generation
    complexity, note, classify_s = None, None, None
    served = None
    if cached:
        note = "cache hit: classification skipped"
    elif ask.requested_model == "auto" and ask.forced_tier is None:
        served = served_quality(config, router)  # once: a refit swap cannot split it
        started = time.perf_counter()
        with timed("classification"):  # includes the embedding, which it computes first
            complexity, note = await _complexity(router.classifier, embedding, build, served)
        if complexity is not None:
            classify_s = time.perf_counter() - started
    plan = None
    if complexity is not None:  # ``auto``, classified: a turn of its session
        plan = await plan_session(config, router, ask, complexity, embedding, served, not explain)
    choice = None if plan is None else plan.choice
    decision = _tier(config, router, ask, complexity, observe=not explain, choice=choice)
    if note is not None and ask.requested_model == "auto":
        decision = replace(decision, trail=(note, *decision.trail))
    decision = fit_tier(config, router.replicas, ask.principal, decision, build)
    session = None
    if plan is not None:
        session = await _keep(config, router, plan, decision.tier, build.request_id, explain)
    escalation, decision = _escalation(config, router, ask, decision)
    return RoutedRequest(
        config=config,
        ask=ask,  # the engine request is built from its generation at dispatch (``Run``)
        created=int(time.time()),
        decision=decision,
        embedding=embedding,
        complexity=complexity,
        classify_s=classify_s,
        quality_model=served,
        session=session,
        escalation=escalation,
    )


def _escalation(
    config: GatewayConfig, router: Router, ask: Ask, decision: TierDecision
) -> tuple[EscalationPlan | None, TierDecision]:
    """``routing.escalation`` (or the tenant's): whether a cheaper tier answers first,
    on the trail either way once it is on. Requests whose answer a token probability
    cannot judge run on the router's tier alone (docs/routing.md, "Escalation")."""
    policy = ask.principal.policy
    spec = policy.escalation_of(config.routing)
    if spec is None:
        return None, decision
    build = ask.generation
    excluded = None
    if build.tools:
        excluded = "tools"
    elif build.response_format is not None and build.response_format.get("type") != "text":
        excluded = "a response_format"
    elif ask.priority == "batch":
        excluded = "a batch line"
    permitted = permitted_tiers(config, policy)
    if demands(build):  # both attempts' tiers must be able to serve it
        permitted = [
            t
            for t in permitted
            if shortfall(tier_support(config, router.replicas, t), build) is None
        ]
    plan, why = plan_escalation(spec, decision, list(config.tiers), permitted, excluded)
    if plan is not None:
        why = f"escalation: {plan.cheap} answers first, then {plan.then} ({plan.reason})"
    return plan, decision if why is None else decision.noted(why)


async def _keep(
    config: GatewayConfig,
    router: Router,
    plan: SessionPlan,
    tier: str,
    request_id: str,
    explain: bool,
) -> SessionTurn:
    """The session after this turn (kept in the store unless it is an explanation)."""
    if explain:
        return session_turn(plan, tier)
    return await record_session(config, router, plan, tier, request_id)


def _tier(
    config: GatewayConfig,
    router: Router,
    ask: Ask,
    complexity: ComplexityScore | None,
    *,
    observe: bool,
    choice: TierChoice | None = None,
) -> TierDecision:
    """The router's call: under ``routing.objective`` the tier with the best expected
    quality - λ · cost (``choice``: the session's, already made), else the score with the
    thresholds learnt from traffic when the policy asks for them (``observe``: the
    request joins the sketch), to a decision."""
    learned: tuple[tuple[float, float] | None, str] = (None, "thresholds")
    shares = router.shares
    objective = config.routing.objective is not None and complexity is not None
    if choice is None and objective and complexity is not None:
        choice = _objective_choice(config, router, complexity, ask.generation, observe)
    elif (
        not objective
        and shares is not None
        and complexity is not None
        and config.routing.target_share
    ):
        tiers = list(config.tiers)
        learned = (
            shares.route(config.routing, tiers, complexity.score, router.background)
            if observe
            else shares.thresholds(config.routing, tiers, router.background)
        )
    return _decide(
        config, ask.principal, ask.requested_model, complexity, ask.forced_tier, learned, choice
    )


def _objective_choice(
    config: GatewayConfig,
    router: Router,
    complexity: ComplexityScore,
    build: GenerationRequest,
    observe: bool,
) -> TierChoice | None:
    """``routing.objective``'s tier for this request (None: no per-tier predictions)."""
    if router.objective is None or complexity.quality is None:
        return None
    messages = build.messages or prompt_messages(build.prompt or "")
    chars = sum(len(message_text(m)) for m in messages)
    return router.objective.choose(config, complexity.quality, chars, router.background, observe)


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
