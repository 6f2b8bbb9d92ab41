"""Escalation's pure decisions: when the cheap tier answers first, and what is kept."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.escalation_spec import EscalationSpec
from routers.decision import TierDecision
from routers.escalation import judge, plan_escalation, quantile, relative_costs, signal_of
from routers.objective import TierChoice, relative

TIERS = ["small", "medium", "large"]
UNSURE = EscalationSpec(mode="unsure", margin=0.1)


def by_score(score: float, tier: str) -> TierDecision:
    return TierDecision(tier, None, score, (), movable=True, thresholds=(0.3, 0.7))


def by_objective(quality: tuple[float, ...], tier: str, lam: float | None = 0.0) -> TierDecision:
    choice = TierChoice(tuple(TIERS), quality, (1.0, 2.0, 4.0), lam, tier, "best value", ())
    return TierDecision(tier, None, 0.5, (), movable=True, choice=choice)


@pytest.mark.parametrize(
    ("score", "tier", "pair"),
    [
        (0.25, "small", ("small", "medium")),  # 0.05 below the low threshold
        (0.38, "medium", ("small", "medium")),  # 0.08 above it
        (0.65, "medium", ("medium", "large")),
        (0.79, "large", ("medium", "large")),
        (0.5, "medium", None),  # 0.2 from both: sure
        (0.05, "small", None),
    ],
)
def test_a_score_near_a_threshold_is_unsure_between_its_two_tiers(
    score: float, tier: str, pair: tuple[str, str] | None
) -> None:
    plan, why = plan_escalation(UNSURE, by_score(score, tier), TIERS, TIERS)
    assert (None if plan is None else (plan.cheap, plan.then)) == pair
    assert (why is None) == (pair is not None)
    if plan is not None:
        assert plan.reason.startswith("unsure: score")


def test_objective_values_within_the_margin_are_unsure() -> None:
    # values = quality - lam * cost share; lam 0.1: small 0.60-0.025, medium 0.66-0.05
    decision = by_objective((0.60, 0.66, 0.70), "large", lam=0.1)
    plan, _ = plan_escalation(UNSURE, decision, TIERS, TIERS)
    # large 0.60, medium 0.61, small 0.575: the top two are medium and large
    assert plan is not None and (plan.cheap, plan.then) == ("medium", "large")
    sure = by_objective((0.2, 0.5, 0.9), "large", lam=0.1)
    assert plan_escalation(UNSURE, sure, TIERS, TIERS) == (None, "escalation: the router is sure")


def test_the_pair_must_hold_the_routers_tier_and_be_permitted() -> None:
    # the top two are small and medium, but a tenant rule moved the tier to large
    moved = by_objective((0.70, 0.72, 0.1), "large")
    plan, why = plan_escalation(UNSURE, moved, TIERS, TIERS)
    assert plan is None and why is not None and "not one of the two" in why
    near = by_score(0.25, "small")
    plan, why = plan_escalation(UNSURE, near, TIERS, ["small", "large"])
    assert plan is None


def test_always_tries_the_tier_below_the_next_one_up() -> None:
    always = EscalationSpec(mode="always")
    for tier, pair in [("small", ("small", "medium")), ("medium", ("medium", "large"))]:
        plan, _ = plan_escalation(always, by_score(0.5, tier), TIERS, TIERS)
        assert plan is not None and (plan.cheap, plan.then) == pair
    plan, _ = plan_escalation(always, by_score(0.9, "large"), TIERS, TIERS)
    assert plan is not None and (plan.cheap, plan.then) == ("medium", "large")


def test_no_escalation_for_a_named_model_a_forced_tier_or_an_excluded_request() -> None:
    always = EscalationSpec(mode="always")
    named = TierDecision("medium", None, None, ())  # not movable
    assert plan_escalation(always, named, TIERS, TIERS)[0] is None
    plan, why = plan_escalation(always, by_score(0.5, "small"), TIERS, TIERS, "tools")
    assert plan is None and why == "escalation: not for tools"
    assert plan_escalation(EscalationSpec(), by_score(0.3, "small"), TIERS, TIERS) == (None, None)
    assert plan_escalation(None, by_score(0.3, "small"), TIERS, TIERS) == (None, None)


def test_quantile_is_numpys_linear_one() -> None:
    rng = np.random.default_rng(3)
    for size in (1, 2, 7, 40):
        values = list(rng.normal(-1.0, 1.0, size))
        for q in (0.0, 0.1, 0.5, 0.9, 1.0):
            assert math.isclose(quantile(values, q), float(np.quantile(values, q)), abs_tol=1e-12)


def test_signals_and_the_verdict() -> None:
    logprobs = [-0.1, -0.2, -3.0, -0.05, -0.4]
    assert signal_of(logprobs, EscalationSpec(signal="min")) == -3.0
    assert math.isclose(signal_of(logprobs, EscalationSpec(signal="mean")) or 0, -0.75)
    spec = EscalationSpec(mode="unsure", threshold=-1.0)  # q0.1 of these: -1.88
    verdict = judge(logprobs, spec)
    assert not verdict.kept and verdict.signal is not None and verdict.signal < -1.0
    assert verdict.why == f"q0.1 {verdict.signal:.4f} < -1"
    assert judge([-0.1, -0.2], spec).kept
    empty = judge([], spec)
    assert empty == empty.__class__(None, False, "no token to judge")


def test_cost_shares_are_the_objectives() -> None:
    for cost in ([1.0, 2.0, 4.0], [0.0, 0.0, 0.0], [3.0, 0.5, 9.0]):
        want = relative(np.asarray([cost]))[0]
        assert relative_costs(cost) == pytest.approx(list(want))
