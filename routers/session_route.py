"""``auto`` for a turn of a session: decided on its task, then kept unless a failure or a
gain that pays for the switch moves it (``routers/session_policy.py``).

Under ``routing.objective`` with ``routing.sessions`` on, ``plan_session`` finds the
request's session (``routers/session.py``) and decides its turn:

* a **new session** (none kept, or a derived one whose conversation starts again) is
  routed by the objective on its **task**, the system messages and the first user
  message, never on a tool result;
* a **later turn** keeps the prediction of its instruction (a new user message is
  predicted afresh) and stays on the session's tier, unless the session carries a
  failure signal (one tier up) or another tier's value is higher once this tier's cached
  prefix is priced at ``cached_input`` and the other's whole context at full input.

Every turn joins the λ sketch as a request, by the prediction it is routed by (its
session's) and priced cold, as before sessions: λ is learnt from the same traffic.

``record_session`` keeps the turn once its tier is final (after the tenant's rules and
the engines' capabilities). ``/v1/route`` plans without recording.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from backends.base import GenerationRequest
from policies.schema import GatewayConfig
from policies.tenants import Principal
from routers.batching import BatcherClosed, EmbeddingFailed
from routers.classifier import ComplexityScore
from routers.decision import permitted_tiers
from routers.embedding import EmbeddingOnce, last_user_text
from routers.features import prompt_messages
from routers.live_sessions import RETRIED, Opened
from routers.objective import TierChoice
from routers.router import Router
from routers.session import (
    Message,
    SessionHint,
    conversation_chars,
    follow_up,
    instruction_digest,
    instruction_messages,
    session_key,
    task_messages,
    turn_digest,
)
from routers.session_policy import (
    Move,
    SessionState,
    SessionTurn,
    escalation,
    keep_or_switch,
    movable_tiers,
)
from routers.tier_costs import expected_costs, prefix_costs
from routers.tier_quality import ServedQuality

log = logging.getLogger(__name__)


class Asked(Protocol):
    """What a turn's session is found by: who asks, what the client said of the
    conversation, and the request (the gateway's ``Ask`` is one)."""

    @property
    def principal(self) -> Principal: ...
    @property
    def session(self) -> SessionHint | None: ...
    @property
    def generation(self) -> GenerationRequest: ...


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """A turn's session decision, before the tenant's rules; what to keep once final."""

    opened: Opened
    choice: TierChoice  # what the turn is routed by; its reason tells the session's part
    quality: tuple[float, ...]  # the prediction the session keeps for its instruction
    instruction: str  # the digest of the user message it was predicted on
    floor: str | None
    turn: int  # 1: the task
    move: Move | None  # a later turn's move (None: a new session)
    cached_chars: int
    chars: int
    digest: str


async def plan_session(
    config: GatewayConfig,
    router: Router,
    ask: Asked,
    complexity: ComplexityScore | None,
    embedding: EmbeddingOnce | None,
    served: ServedQuality | None,
    observe: bool,
) -> SessionPlan | None:
    """The session's decision for this turn (None: sessions off, or no per-tier
    predictions to route a session by)."""
    spec, sessions, objective = config.routing.sessions, router.sessions, router.objective
    if spec is None or sessions is None or objective is None:
        return None
    if config.routing.objective is None or complexity is None or complexity.quality is None:
        return None
    generation = ask.generation
    messages = list(generation.messages or prompt_messages(generation.prompt or ""))
    key = session_key(ask.principal.tenant, ask.session, messages, generation.tools)
    opened = await sessions.open(key)
    state, tiers = opened.state, tuple(config.tiers)
    later = (
        state is not None
        and state.tier in tiers
        and len(state.quality) == len(tiers)
        and (key.explicit or follow_up(messages))
    )
    if later:
        return await _later(
            config, router, ask, messages, complexity, embedding, served, opened, observe
        )
    return await _fresh(config, router, messages, complexity, embedding, served, opened, observe)


async def _predict(
    router: Router,
    messages: Sequence[Message],
    embedding: EmbeddingOnce | None,
    served: ServedQuality | None,
    fallback: ComplexityScore,
) -> tuple[float, ...]:
    """Per-tier P(acceptable) of ``messages`` (the request's vector when its last user
    text is theirs); the request's own prediction if the embedder fails."""
    if router.classifier is None or router.embedder is None:
        return fallback.quality or ()
    text = last_user_text(messages)
    once = embedding if embedding is not None and embedding.text == text else None
    once = once or EmbeddingOnce(router.embedder, text)
    try:
        quality = None if served is None else served.quality
        score = await router.classifier.classify(messages, once, quality)
    except (EmbeddingFailed, BatcherClosed) as exc:
        log.warning("session prediction failed, using the turn's: %s", exc)
        return fallback.quality or ()
    return score.quality or fallback.quality or ()


async def _fresh(
    config: GatewayConfig,
    router: Router,
    messages: list[Message],
    complexity: ComplexityScore,
    embedding: EmbeddingOnce | None,
    served: ServedQuality | None,
    opened: Opened,
    observe: bool,
) -> SessionPlan:
    assert router.objective is not None
    task = task_messages(messages)
    quality = complexity.quality or ()
    if len(task) != len(messages):
        quality = await _predict(router, task, embedding, served, complexity)
    chars = conversation_chars(messages)
    choice = router.objective.choose(config, quality, chars, router.background, observe)
    key = opened.key
    trouble = f"{opened.trouble}; " if opened.trouble else ""
    reason = f"{trouble}session {key.short} ({key.source}) turn 1, decided on its task; "
    return SessionPlan(
        opened,
        replace(choice, reason=reason + choice.reason),
        tuple(quality),
        instruction_digest(messages),
        None,
        1,
        None,
        0,
        chars,
        turn_digest(messages, None),
    )


async def _later(
    config: GatewayConfig,
    router: Router,
    ask: Asked,
    messages: list[Message],
    complexity: ComplexityScore,
    embedding: EmbeddingOnce | None,
    served: ServedQuality | None,
    opened: Opened,
    observe: bool,
) -> SessionPlan:
    objective, spec, sessions = router.objective, config.routing.sessions, router.sessions
    configured, state = config.routing.objective, opened.state
    assert objective and spec and sessions and configured and state
    tiers, chars = tuple(config.tiers), conversation_chars(messages)
    digest = turn_digest(messages, None)
    signal = opened.signal or (RETRIED if digest == state.last_turn else None)
    instruction, quality, floor = instruction_digest(messages), state.quality, state.floor
    if instruction != state.instruction:  # a new user message: predicted afresh
        quality = await _predict(
            router, instruction_messages(messages), embedding, served, complexity
        )
        floor = None
    if observe:  # the turn is traffic, by the prediction it is routed by, priced cold
        objective.observe(config, quality, chars)
    lam, allowed, why = objective.operating(config, router.background)
    cached = sessions.cached_chars(spec, opened, state.tier, ask.generation, chars, time.time())
    cost = prefix_costs(config, configured, chars, {state.tier: cached})
    scale = expected_costs(config, configured, chars)[-1]
    among = movable_tiers(quality, cost, scale, lam or 0.0, allowed, configured.dominance)
    if signal is not None and spec.escalate:
        move = _escalate(tiers, state.tier, permitted_tiers(config, ask.principal.policy), signal)
        floor = move.floor or floor
    elif lam is None:
        move = Move(state.tier, f"stays on {state.tier} (no λ: each request alone)", False)
    else:
        move = keep_or_switch(tiers, state.tier, quality, cost, scale, lam, among, floor)
    if observe:
        objective.chose(quality, expected_costs(config, configured, chars), tiers.index(move.tier))
    key = opened.key
    reason = f"session {key.short} ({key.source}) turn {state.turns + 1}: {move.reason} ({why})"
    choice = TierChoice(
        tiers,
        tuple(round(float(q), 4) for q in quality),
        tuple(cost),
        lam,
        move.tier,
        reason,
        tuple(tiers[i] for i in among),
    )
    return SessionPlan(
        opened,
        choice,
        tuple(quality),
        instruction,
        floor,
        state.turns + 1,
        move,
        cached,
        chars,
        digest,
    )


def _escalate(tiers: Sequence[str], current: str, permitted: Sequence[str], signal: str) -> Move:
    up = escalation(tiers, current, permitted)
    if up is None:
        return Move(current, f"{signal}, and {current} is the top permitted tier: stays", False)
    return Move(up, f"escalates {current} -> {up} ({signal})", True, up)


async def record_session(
    config: GatewayConfig, router: Router, plan: SessionPlan, tier: str, request_id: str
) -> SessionTurn:
    """Keep the turn on its final ``tier`` (after the tenant's rules) in the store."""
    assert router.sessions is not None and config.routing.sessions is not None
    await router.sessions.record(
        config.routing.sessions, plan.opened, kept_state(plan, tier), request_id
    )
    return session_turn(plan, tier)


def kept_state(plan: SessionPlan, tier: str) -> SessionState:
    """The session after this turn, on ``tier``."""
    before = plan.opened.state if plan.move is not None else None
    state = SessionState(
        tier=before.tier if before is not None else tier,
        quality=plan.quality,
        instruction=plan.instruction,
        turns=plan.turn,
        moves=before.moves if before is not None else 0,
        floor=plan.floor,
        chars=plan.chars,
        at=time.time(),
        last_turn=plan.digest,
        trail=before.trail if before is not None else (),
    )
    if state.tier != tier:
        why = plan.move.reason if plan.move is not None and plan.move.tier == tier else tier
        state = state.moved_to(tier, f"turn {plan.turn}: {why}")
    return state


def session_turn(plan: SessionPlan, tier: str) -> SessionTurn:
    before = plan.opened.state if plan.move is not None else None
    replica = plan.opened.replica
    return SessionTurn(
        plan.opened.key,
        plan.turn,
        tier,
        plan.choice.reason,
        before is not None and before.tier != tier,
        plan.cached_chars if before is not None and before.tier == tier else 0,
        replica[1] if replica is not None and replica[0] == tier else None,
    )
