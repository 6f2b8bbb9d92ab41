"""Escalation's two decisions, pure functions of numbers (docs/routing.md, "Escalation").

``plan_escalation``: before the request runs, whether a cheaper tier answers first, and
which tier is asked if its answer is weak. ``judge``: once the cheap answer is whole,
whether it is kept, from its token log-probabilities alone (no extra generation: Gupta et
al., ICLR 2024, "Language model cascades: token-level uncertainty and beyond").

The router is *unsure* when its two best tiers lie within ``margin``:

- under ``routing.objective``: their values ``P(acceptable) - λ · cost share`` (the
  objective's own; without a pooled λ, P(acceptable) alone), among the tiers the
  objective chose from;
- under thresholds: the score lies within ``margin`` of the threshold between them.

The pair is escalated cheap-first only when it holds the router's tier (a tenant rule
that moved the tier elsewhere is the tenant's word) and the tenant may use both tiers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from policies.escalation_spec import EscalationSpec
from routers.decision import TierDecision


@dataclass(frozen=True, slots=True)
class EscalationPlan:
    """The cheap tier answers first; a weak answer is re-asked on ``then``."""

    cheap: str
    then: str
    reason: str
    spec: EscalationSpec


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judge's word on the cheap answer: its ``signal`` (None: no token to judge),
    whether it is ``kept``, and why, for the trail."""

    signal: float | None
    kept: bool
    why: str


def plan_escalation(
    spec: EscalationSpec | None,
    decision: TierDecision,
    tiers: Sequence[str],
    permitted: Sequence[str],
    excluded: str | None = None,
) -> tuple[EscalationPlan | None, str | None]:
    """The plan for this request (None: the router's tier alone) and, when escalation is
    on but does not apply, why not (for ``/v1/route`` and the trail). ``tiers``: every
    tier, cheapest first; ``permitted``: the tenant's; ``excluded``: what about the
    request rules it out (tools, a JSON schema, a batch line)."""
    if spec is None or not spec.on:
        return None, None
    if not decision.movable:
        return None, "escalation: not for a named model or a forced tier"
    if excluded is not None:
        return None, f"escalation: not for {excluded}"
    if decision.tier not in permitted or len(permitted) < 2:
        return None, "escalation: the tenant has one tier"
    if spec.mode == "always":
        at = permitted.index(decision.tier)
        cheap, then = (
            permitted[at : at + 2] if at + 1 < len(permitted) else permitted[at - 1 : at + 1]
        )
        return EscalationPlan(cheap, then, "tenant policy: always", spec), None
    pair = unsure_pair(decision, tiers, spec.margin)
    if pair is None:
        return None, "escalation: the router is sure"
    (cheap, then), reason = pair
    if decision.tier not in (cheap, then) or cheap not in permitted or then not in permitted:
        return None, "escalation: the router's tier is not one of the two it doubts"
    return EscalationPlan(cheap, then, reason, spec), None


def unsure_pair(
    decision: TierDecision, tiers: Sequence[str], margin: float
) -> tuple[tuple[str, str], str] | None:
    """The two tiers the router cannot tell apart (cheapest first) and why, else None."""
    choice = decision.choice
    if choice is not None:
        ladder = choice.tiers
        allowed = [t for t in ladder if t in choice.allowed] if choice.allowed else list(ladder)
        if len(allowed) < 2:
            return None
        lam = choice.lam or 0.0
        share = relative_costs(choice.cost)
        value = {t: choice.quality[i] - lam * share[i] for i, t in enumerate(ladder)}
        first, second = sorted(allowed, key=lambda t: (-value[t], ladder.index(t)))[:2]
        gap = value[first] - value[second]
        if gap > margin:
            return None
        pair = sorted((first, second), key=ladder.index)
        why = f"unsure: {first} {value[first]:.3f} vs {second} {value[second]:.3f}"
        return (pair[0], pair[1]), f"{why} (within {margin:g})"
    if decision.thresholds is None or decision.score is None:
        return None
    return _near_threshold(list(tiers), decision.thresholds, decision.score, margin)


def _near_threshold(
    ladder: list[str], thresholds: tuple[float, float], score: float, margin: float
) -> tuple[tuple[str, str], str] | None:
    """The two tiers either side of the threshold nearest the score, as
    ``routers.decision.tier_for_score`` maps them, when it lies within ``margin``."""
    if len(ladder) < 2:
        return None
    low, high = thresholds
    bounds = [(low, ladder[0], ladder[1])]
    if len(ladder) > 2:
        bounds.append((high, ladder[1], ladder[-1]))
    near = min(bounds, key=lambda b: abs(score - b[0]))
    if abs(score - near[0]) > margin:
        return None
    return (near[1], near[2]), f"unsure: score {score:.3f} within {margin:g} of {near[0]:.3f}"


def relative_costs(cost: Sequence[float]) -> list[float]:
    """Costs as shares of the dearest (last) tier's, as ``routers.objective.relative``
    weighs them (in plain floats: a few tiers, on every request)."""
    largest = cost[-1]
    return [c / largest if largest > 0 else 0.0 for c in cost]


def signal_of(logprobs: Sequence[float], spec: EscalationSpec) -> float | None:
    """The answer's log-probabilities reduced to one number; None when it has none."""
    if not logprobs:
        return None
    if spec.signal == "mean":
        return math.fsum(logprobs) / len(logprobs)
    if spec.signal == "min":
        return min(logprobs)
    return quantile(logprobs, spec.quantile)


def quantile(values: Sequence[float], q: float) -> float:
    """numpy's default (linear) quantile, without numpy for a short list."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    below = math.floor(at)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (at - below)


def judge(logprobs: Sequence[float], spec: EscalationSpec) -> Verdict:
    """Keep the cheap answer when its signal reaches the threshold; an answer with no
    token (nothing to judge) is re-asked."""
    signal = signal_of(logprobs, spec)
    name = f"q{spec.quantile:g}" if spec.signal == "quantile" else spec.signal
    if signal is None:
        return Verdict(None, False, "no token to judge")
    kept = signal >= spec.threshold
    relation = ">=" if kept else "<"
    return Verdict(signal, kept, f"{name} {signal:.4f} {relation} {spec.threshold:g}")
