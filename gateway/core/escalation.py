"""Escalation's run: the cheap attempt, held whole, judged, then kept or re-asked.

When routing planned an escalation (``RoutedRequest.escalation``, ``routers.escalation``)
and admission held both attempts' worst cases (``Ticket.escalation_held``), the cheap tier
answers first with its token log-probabilities. The answer is held whole — a stream's
client sees nothing until the verdict (its headers say which way it went) — and judged
(``routers.escalation.judge``):

- kept: the run is primed with a replay of the held answer, as a cache hit is; the client
  gets it as if the tier had streamed it (log-probabilities only when it asked for them);
- weak (or the cheap attempt failed): its cost joins the request's, and the run moves to
  the next tier (``Run._move``) and dispatches there as any request does.

Without both attempts held (the budget fits one only) the router's tier runs alone. The
client sees one answer either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from backends.base import Chunk, GenerationRequest, Usage
from backends.errors import EngineError
from backends.pool import EnginePool, StreamInfo
from gateway.errors import GatewayTimeout
from gateway.guardrails.guard import RequestGuard
from gateway.money.hold import Hold
from gateway.money.spend import model_cost
from gateway.telemetry.timing import timed
from gateway.telemetry.tracing import RequestTrace
from gateway.types import Outcome, Progress, RoutedRequest
from policies.schema import GatewayConfig
from routers.decision import TierDecision
from routers.escalation import EscalationPlan, Verdict, judge

ESCALATION = "escalation.first_attempt"  # the trace span of the cheap attempt


class Run(Protocol):
    """What an attempt uses of the request's run (``gateway.core.serving.Run``): its
    tier moves, engine requests, priming and endings stay the run's own."""

    routed: RoutedRequest
    config: GatewayConfig
    pools: Mapping[str, EnginePool]
    hold: Hold
    progress: Progress
    decision: TierDecision
    trace: RequestTrace
    guard: RequestGuard | None  # guardrails: local tiers only, the answer's window
    _deadline: float

    def _move(self, tier: str, why: str) -> None: ...
    def _engine_request(self, decision: TierDecision) -> GenerationRequest: ...
    def _held(self, tier: str) -> tuple[str, int] | None: ...
    def _primed(self, stream: AsyncIterator[Chunk], first: Chunk) -> None: ...
    def _end(self, error: str | None, denied: str | None = None) -> Outcome: ...
    def _timed_out(self) -> GatewayTimeout: ...


async def first_attempt(run: Run) -> bool:
    """Run the cheap attempt when the plan was held; True: its answer is kept and the run
    is primed with it; False: the run dispatches on its tier (moved up when the cheap
    answer was weak)."""
    plan, ticket = run.routed.escalation, run.hold.ticket
    if plan is None or ticket is None:
        return False
    guard = run.guard
    if guard is not None and not guard.admits(plan.cheap):
        return False  # a ``local`` request: no attempt on a remote cheap tier
    if not ticket.escalation_held:
        if not ticket.downgraded:
            run.progress.trail = (
                *run.progress.trail,
                f"escalation: the budget holds one attempt only: {run.decision.tier} alone",
            )
        return False
    with run.trace.stage(ESCALATION, {"tiergate.tier": plan.cheap}) as span:
        held = await _attempt(run, plan)
        verdict = held.verdict(plan)
        span.set_attribute("tiergate.escalation.kept", verdict.kept)
        if verdict.signal is not None:
            span.set_attribute("tiergate.escalation.signal", verdict.signal)
    progress = run.progress
    progress.escalation_signal = verdict.signal
    if held.chunks is not None and verdict.kept:
        progress.escalation = "kept"
        run._move(plan.cheap, f"escalation: kept the {plan.cheap} answer ({verdict.why})")
        progress.model, progress.replica = held.model, held.replica
        progress.dispatched = True
        replay = _replay(held.chunks)
        if guard is not None:  # the held answer through the guardrails' window, as any
            replay = guard.stream(plan.cheap, replay)
        run._primed(replay, await anext(replay))
        return True
    progress.escalation = "escalated"
    progress.escalation_added_usd, progress.escalation_tokens = held.cost_usd, held.tokens
    run._move(plan.then, f"escalation: {plan.cheap} answer weak ({verdict.why}): {plan.then}")
    return False


def headers(seen: Progress | Outcome) -> dict[str, str]:
    """``x-tiergate-escalated`` (``true``: the cheap answer was re-asked one tier up;
    ``false``: it was kept) and the signal it was judged by, when a cheap tier answered
    first; a stream sends them after the verdict, as the cheap attempt is held."""
    if seen.escalation is None:
        return {}
    out = {"x-tiergate-escalated": str(seen.escalation == "escalated").lower()}
    if seen.escalation_signal is not None:
        out["x-tiergate-escalation-signal"] = f"{seen.escalation_signal:.6f}"
    return out


@dataclass(frozen=True, slots=True)
class HeldAnswer:
    """The cheap attempt as it ended: its chunks as the client would get them (None: it
    failed before its end), its tokens' log-probabilities, and what it cost."""

    chunks: list[Chunk] | None
    logprobs: list[float]
    model: str
    replica: str | None
    cost_usd: float
    tokens: int  # prompt and completion, as charged

    def verdict(self, plan: EscalationPlan) -> Verdict:
        if self.chunks is None:
            return Verdict(None, False, "it failed")
        return judge(self.logprobs, plan.spec)


async def _attempt(run: Run, plan: EscalationPlan) -> HeldAnswer:
    """The cheap tier's whole answer, asked with log-probabilities. Raises the run's
    timeout at the request's deadline; a cancelled request aborts it."""
    config, cheap = run.config, plan.cheap
    asked = run.routed.ask.generation.logprobs  # else they are the judge's, not the client's
    request = replace(run._engine_request(run.decision.moved(cheap, "")), logprobs=True)
    info = StreamInfo()
    stream = run.pools[cheap].stream(request, info, held=run._held(cheap))
    chunks: list[Chunk] = []
    logprobs: list[float] = []
    failed = False
    try:
        with timed("engine"):
            async with asyncio.timeout_at(run._deadline):
                async for chunk in stream:
                    if chunk.logprobs:
                        logprobs.extend(entry.logprob for entry in chunk.logprobs)
                        chunk = chunk if asked else replace(chunk, logprobs=None)
                    chunks.append(chunk)
    except EngineError:
        failed = True  # nothing of it reaches the client; the next tier answers
    except (TimeoutError, asyncio.CancelledError) as exc:
        _ended_holding(run, plan, info, chunks)
        if isinstance(exc, TimeoutError):
            raise run._timed_out() from None
        run._end("cancelled")
        raise
    finally:
        await _aclose(stream)
    model = _model(run, cheap, info)
    ended = not failed and bool(chunks) and chunks[-1].finish_reason is not None
    usage = chunks[-1].usage if chunks else None
    if usage is None:  # what it streamed, one token a chunk (never more than its cap)
        ticket = run.hold.ticket
        prompt = ticket.prompt_upper if ticket is not None and chunks else 0
        usage = Usage(prompt, min(_tokens(chunks), run.progress.run_cap))
    cost = model_cost(config, model, usage)
    kept = chunks if ended else None
    return HeldAnswer(kept, logprobs, model, info.replica, cost, usage.total_tokens)


def _model(run: Run, tier: str, info: StreamInfo) -> str:
    config = run.config
    return info.model or config.engines[config.tiers[tier].engines[0]].model


def _tokens(chunks: Sequence[Chunk]) -> int:
    return sum(1 for c in chunks if c.text or c.tool_call_deltas)


def _ended_holding(run: Run, plan: EscalationPlan, info: StreamInfo, chunks: list[Chunk]) -> None:
    """The request ended (deadline, client gone) while the cheap answer was held: it is
    charged as what the cheap tier generated, as a stream cut short is."""
    if not chunks:
        return
    run._move(plan.cheap, f"escalation: ended during the {plan.cheap} attempt")
    progress = run.progress
    progress.model, progress.replica, progress.dispatched = (
        _model(run, plan.cheap, info),
        info.replica,
        True,
    )
    progress.streamed_chunks = _tokens(chunks)


async def _replay(chunks: Sequence[Chunk]) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk


async def _aclose(stream: AsyncIterator[Chunk]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
