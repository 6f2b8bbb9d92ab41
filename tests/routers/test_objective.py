"""The objective policy: λ from a sketch of the traffic meets the objective on it."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from routers.lambda_sketch import COST_UNIT, lambda_for
from routers.objective import (
    Objective,
    _sketch_core,
    alone,
    choose,
    decide_tier,
    relative,
    route_traffic,
    sketch_of,
    sketch_request,
    steps,
    traffic_operating,
)
from routers.objective_segment import hull_vertices, segment, tiers_in
from routers.training.frontier import fixed_points, hull_accuracy, point


def traffic(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    easiness = rng.normal(size=n)
    ability = np.array([-1.0, 0.0, 1.5])
    quality = 1 / (1 + np.exp(-(easiness[:, None] + ability[None, :])))
    tokens = rng.integers(20, 2000, size=n)[:, None]
    cost = tokens * np.array([0.06, 0.18, 0.88])[None, :] / 1e6
    return quality, cost


def test_steps_walk_the_upper_hull_cheaper_as_lambda_grows() -> None:
    # medium is dominated (no better than the mix of small and large): skipped
    out = steps([0.5, 0.55, 0.9], [1.0, 2.0, 3.0])
    assert [round(s[0], 6) for s in out] == [0.2]
    assert out[0][1:] == (2.0, pytest.approx(0.4))
    # a cheaper tier as good as the best: chosen at λ = 0 already, no steps above it
    assert steps([0.9, 0.9, 0.9], [1.0, 2.0, 3.0]) == []
    # every step on the hull, in order
    lams = [s[0] for s in steps([0.3, 0.7, 0.8], [1.0, 2.0, 4.0])]
    assert lams == sorted(lams) and len(lams) == 2


def test_cost_objective_spends_at_most_its_share_and_little_less() -> None:
    quality, cost = traffic(5000)
    # requests differ in how their costs split between input and output (shares differ)
    cost[:, :2] *= np.random.default_rng(9).uniform(0.5, 1.5, (len(cost), 2))
    for share in (0.1, 0.25, 0.5):
        lam = lambda_for(sketch_of(quality, cost), "cost", share)
        tiers = choose(quality, cost, lam)
        # each request's cost as a share of what the largest tier would charge for it
        spent = relative(cost)[np.arange(len(cost)), tiers].mean()
        assert spent <= share * (1 + 1e-9)
        assert spent >= share - 0.01


def test_quality_objective_reaches_its_share_at_least_cost() -> None:
    quality, cost = traffic(5000, seed=1)
    target = 0.95 * quality[:, -1].sum()
    lam = lambda_for(sketch_of(quality, cost), "quality", 0.95)
    tiers = choose(quality, cost, lam)
    reached = quality[np.arange(len(quality)), tiers].sum()
    assert reached >= target
    # a slightly larger λ (cheaper) would miss the target: λ is the largest that meets it
    cheaper = choose(quality, cost, lam * 1.02)
    assert quality[np.arange(len(quality)), cheaper].sum() < target + 0.5
    assert cost[np.arange(len(cost)), tiers].sum() < cost[:, -1].sum()


def test_sketches_merge_by_adding_counts() -> None:
    quality, cost = traffic(600, seed=2)
    whole = sketch_of(quality, cost)
    halves = sketch_of(quality[:300], cost[:300]) + sketch_of(quality[300:], cost[300:])
    assert whole == halves
    assert lambda_for(whole, "cost", 0.3) == lambda_for(halves, "cost", 0.3)


def test_without_signal_every_request_goes_to_one_fixed_tier() -> None:
    # the same predictions and cost for every request: no request is told apart
    quality = np.tile([0.5, 0.64, 0.81], (400, 1))
    cost = np.tile([1.3, 4.0, 100.0], (400, 1)) * 1e-5
    tiers, lam = route_traffic(quality, cost, Objective("cost", 0.25), min_samples=200)
    assert lam is not None and len(set(tiers.tolist())) == 1
    assert tiers[0] == 1  # the best tier for the objective, not the smallest by quota
    rng = np.random.default_rng(0)
    correct = (rng.random((400, 3)) < quality).astype(float)
    spent = point(tiers, correct, cost)
    assert spent.accuracy == pytest.approx(hull_accuracy(fixed_points(correct, cost), spent.cost))


def test_alone_meets_the_objective_per_request() -> None:
    quality, cost = [0.97, 0.98, 0.99], [1.0, 3.0, 15.0]
    assert alone(quality, cost, Objective("quality", 0.95)) == 0
    assert alone([0.2, 0.5, 0.8], cost, Objective("quality", 0.95)) == 2
    assert alone([0.2, 0.5, 0.8], cost, Objective("cost", 0.25)) == 1
    choice = decide_tier(("s", "m", "l"), [0.2, 0.5, 0.8], cost, None, Objective("cost", 0.25), "x")
    assert choice.tier == "m" and choice.lam is None and "alone" in choice.reason


def test_fewer_rows_than_min_samples_are_routed_alone() -> None:
    quality, cost = traffic(50, seed=3)
    tiers, lam = route_traffic(quality, cost, Objective("quality", 0.9), min_samples=200)
    assert lam is None
    expected = [
        alone(list(q), list(c), Objective("quality", 0.9))
        for q, c in zip(quality, cost, strict=True)
    ]
    assert tiers.tolist() == expected


def test_sketch_counts_are_integers_in_fixed_units() -> None:
    counts: Counter[str] = Counter()
    sketch_request(counts, [0.5, 0.9], [1e-6, 1e-5])
    assert counts["n"] == 1 and counts["CL"] == round(1.0 / COST_UNIT)  # a share of itself
    assert all(isinstance(v, int) for v in counts.values())


def test_hull_vertices_drop_dominated_and_below_chord_tiers() -> None:
    assert hull_vertices([1.0, 2.0, 3.0], [0.5, 0.55, 0.9]) == [0, 2]  # below the chord
    assert hull_vertices([1.0, 2.0, 3.0], [0.5, 0.4, 0.9]) == [0, 2]  # worse and dearer
    assert hull_vertices([1.0, 2.0, 100.0], [0.3, 0.55, 0.7]) == [0, 1, 2]


def test_requests_never_cross_a_vertex_of_the_predicted_hull() -> None:
    # small is predicted nearly as good as medium for some requests (noise in its head):
    # the unguarded argmax sends those to small while the objective sits between medium
    # and large; the segment keeps every request on medium or large
    rng = np.random.default_rng(4)
    n = 2000
    quality = np.column_stack(
        [rng.normal(0.76, 0.03, n), rng.normal(0.78, 0.015, n), rng.normal(0.89, 0.01, n)]
    )
    cost = np.tile([0.5, 1.9, 100.0], (n, 1)) * 1e-5
    objective = Objective("quality", 0.95)
    assert (choose(quality, cost, traffic_lambda_unguarded(quality, cost)) == 0).any()
    where = traffic_operating(quality, cost, objective)
    assert where.allowed == (1, 2)
    tiers, _ = route_traffic(quality, cost, objective, min_samples=200)
    assert set(tiers.tolist()) <= {1, 2}
    # and the objective still holds on the traffic, restricted to the segment
    reached = quality[np.arange(n), tiers].sum()
    assert reached >= 0.95 * quality[:, -1].sum()
    assert 0 < (tiers == 1).mean() < 1  # it trades along the segment, not at a vertex


def test_cost_objective_on_a_segment_spends_at_most_its_share() -> None:
    quality, cost = traffic(4000, seed=5)
    for share in (0.02, 0.25, 0.6):
        where = traffic_operating(quality, cost, Objective("cost", share))
        tiers = choose(quality, cost, where.lam, where.allowed)
        assert set(tiers.tolist()) <= set(where.allowed) and len(where.allowed) <= 2
        spent = relative(cost)[np.arange(len(cost)), tiers].mean()
        assert spent <= share * (1 + 1e-9) or where.allowed == (0,)


def test_segment_of_sketch_without_tier_totals_is_every_tier() -> None:
    assert segment({"n": 3, "CL": 10}, 3, "cost", 0.5) == (0, 1, 2)
    counts: Counter[str] = Counter()
    sketch_request(counts, [0.5, 0.6, 0.9], [1.0, 2.0, 50.0])
    assert tiers_in(counts) == 3 and any(k.startswith("p0.2:") for k in counts)
    assert all(isinstance(v, int) for v in counts.values())


def traffic_lambda_unguarded(quality: np.ndarray, cost: np.ndarray) -> float:
    return lambda_for(sketch_of(quality, cost), "quality", 0.95)


def test_each_pair_sketch_is_the_sketch_of_the_request_on_those_two_tiers() -> None:
    rng = np.random.default_rng(6)
    for _ in range(200):
        quality = list(rng.choice([0.5, 0.7, 0.9], 3) + rng.normal(0, 0.05, 3) * rng.integers(2))
        cost = list(rng.choice([1.0, 2.0, 5.0], 3))
        counts: Counter[str] = Counter()
        sketch_request(counts, quality, cost)
        shares = [c / cost[-1] for c in cost]
        for pair in ((0, 1), (0, 2), (1, 2)):
            alone_pair: Counter[str] = Counter()
            # the general sketch on the two tiers, costs still shares of the largest tier
            _sketch_core(alone_pair, [quality[t] for t in pair], [shares[t] for t in pair])
            prefix = f"p{pair[0]}.{pair[1]}:"
            mine = {k[len(prefix) :]: v for k, v in counts.items() if k.startswith(prefix)}
            expected = {k: v for k, v in alone_pair.items() if v and k not in {"CL", "QL"}}
            assert {k: v for k, v in mine.items() if v} == expected


def test_a_segment_of_another_tier_count_falls_back_to_every_tier() -> None:
    quality, cost = [0.5, 0.9], [1.0, 3.0]
    objective = Objective("quality", 0.95)
    # a window sketched with three tiers, read after a reload to two
    choice = decide_tier(("s", "l"), quality, cost, 0.01, objective, "x", (1, 2))
    assert choice.allowed == ("s", "l") and choice.tier == "l"
    assert decide_tier(("s", "l"), quality, cost, 0.01, objective, "x", ()).allowed == ("s", "l")


def test_segment_off_chooses_among_every_tier() -> None:
    rng = np.random.default_rng(4)
    n = 2000
    quality = np.column_stack(
        [rng.normal(0.76, 0.03, n), rng.normal(0.78, 0.015, n), rng.normal(0.89, 0.01, n)]
    )
    cost = np.tile([0.5, 1.9, 100.0], (n, 1)) * 1e-5
    off = Objective("quality", 0.95, segment=False)
    assert traffic_operating(quality, cost, off).allowed == (0, 1, 2)
    tiers, lam = route_traffic(quality, cost, off, min_samples=200)
    assert lam == traffic_lambda_unguarded(quality, cost)
    assert (tiers == 0).any()
