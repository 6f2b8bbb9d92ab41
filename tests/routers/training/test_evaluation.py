"""RouteLLM's metrics on routers whose answer is known by construction."""

from __future__ import annotations

import numpy as np

from routers.training.evaluation import (
    QUANTILES,
    apgr_difference_ci,
    best_three_tier,
    best_two_head_tier,
    calibration,
    pgr_curve,
    random_report,
    random_three_tier,
    report,
    three_tier_difference_ci,
    tier_mix,
)


def labels(n: int = 1000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    strong = (rng.random(n) < 0.85).astype(float)
    weak = strong * (rng.random(n) < 0.7)  # weak is right only where strong is
    return weak, strong


def test_oracle_router_reaches_full_quality_early() -> None:
    weak, strong = labels()
    oracle = strong - weak  # exactly the requests the strong model rescues
    result = report(oracle, weak, strong)
    gain_share = float((strong - weak).mean())
    assert result.cpt50 <= gain_share / 2 + 0.011
    assert result.cpt80 <= gain_share * 0.8 + 0.011
    assert result.apgr > 0.8
    assert result.pgr[0] == 0.0
    assert result.pgr[-1] == 1.0


def test_reversed_oracle_is_worse_than_random_and_random_is_half() -> None:
    weak, strong = labels()
    worst = report(-(strong - weak), weak, strong)
    rand = random_report(weak, strong, seed=3)
    assert worst.apgr < 0.3
    assert abs(rand.apgr - 0.5) < 0.03


def test_pgr_is_linear_in_the_share_of_rescued_requests() -> None:
    # 10 requests, the strong model rescues only the top-scored one
    weak = np.zeros(10)
    strong = np.zeros(10)
    strong[0] = 1.0
    scores = -np.arange(10.0)
    curve = pgr_curve(scores, weak, strong, QUANTILES)
    assert curve[0] == 0.0
    assert np.all(curve[1:] == 1.0)


def test_constant_scores_are_broken_at_random_not_in_file_order() -> None:
    weak = np.zeros(1000)
    strong = np.zeros(1000)
    strong[:100] = 1.0  # in file order the first ones would win every tie
    apgr = report(np.zeros(1000), weak, strong, seed=0).apgr
    assert abs(apgr - 0.5) < 0.08


def test_no_gap_gives_nan_not_a_fake_number() -> None:
    weak = strong = np.ones(5)
    assert np.isnan(report(np.arange(5.0), weak, strong).apgr)


def three_tiers(n: int = 600, seed: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Difficulty d decides which tiers answer: small if d < 0.5, medium if d < 0.8."""
    rng = np.random.default_rng(seed)
    d = rng.random(n)
    correct = np.stack([d < 0.5, d < 0.8, np.ones(n, bool)], axis=1).astype(float)
    cost = np.tile([1.0, 3.0, 50.0], (n, 1))
    return d, correct, cost


def test_three_tier_oracle_beats_random_within_the_budget() -> None:
    d, correct, cost = three_tiers()
    oracle = best_three_tier(d, correct, cost, budget=0.25)
    rand = random_three_tier(correct, cost, budget=0.25, runs=5)
    assert oracle.cost_share <= 0.25 + 1e-9 and rand.cost_share <= 0.25 + 1e-9
    # 20 % need large; the budget pays for ~22 % large: the oracle answers nearly all.
    assert oracle.accuracy > 0.97
    assert rand.accuracy < oracle.accuracy - 0.1
    assert abs(sum(oracle.shares) - 1.0) < 1e-9


def test_bootstrap_interval_of_an_apgr_difference() -> None:
    weak, strong = labels(400)
    oracle = strong - weak
    noise = np.random.default_rng(5).random(len(weak))
    lo, hi = apgr_difference_ci(oracle, noise, weak, strong, draws=200)
    assert 0.2 < lo < hi  # the oracle is better on every resample
    same = apgr_difference_ci(noise, noise, weak, strong, draws=50)
    assert same == (0.0, 0.0)
    lo, hi = apgr_difference_ci(noise, noise[::-1].copy(), weak, strong, draws=200)
    assert lo < 0 < hi  # two random routers: the interval straddles zero


def test_three_tier_bootstrap_interval_separates_oracle_from_random() -> None:
    d, correct, cost = three_tiers(300)
    noise = np.random.default_rng(6).random(len(d))
    lo, hi = three_tier_difference_ci(d, noise, correct, cost, draws=40)
    assert 0.05 < lo < hi


def test_two_head_split_uses_the_second_score_for_large() -> None:
    d, correct, cost = three_tiers()
    # one score for both splits: the two-head search reaches the one-score optimum
    one = best_three_tier(d, correct, cost, budget=0.25, step=0.02)
    both = best_two_head_tier(d, d, correct, cost, budget=0.25, step=0.02)
    assert abs(both.accuracy - one.accuracy) < 1e-9 and both.cost_share <= 0.25 + 1e-9
    # a score that knows only "small is enough" cannot pick large; the second head can
    small_ok = (d < 0.5).astype(float) + np.random.default_rng(7).random(len(d)) * 0.1
    large_needed = (d >= 0.8).astype(float)
    blind = best_three_tier(1 - small_ok, correct, cost, budget=0.25, step=0.02)
    helped = best_two_head_tier(1 - small_ok, large_needed, correct, cost, 0.25, step=0.02)
    assert helped.accuracy > blind.accuracy + 0.1
    assert helped.cost_share <= 0.25 + 1e-9


def test_three_tier_mix_counts_cost_and_accuracy() -> None:
    _, correct, cost = three_tiers(10)
    large = tier_mix(np.full(10, 2, np.intp), correct, cost)
    assert (large.accuracy, large.cost_share, large.shares) == (1.0, 1.0, (0.0, 0.0, 1.0))
    small = tier_mix(np.zeros(10, np.intp), correct, cost)
    assert small.cost_share == 1 / 50
    assert small.accuracy == correct[:, 0].mean()


def test_calibration_of_a_calibrated_and_an_overconfident_score() -> None:
    rng = np.random.default_rng(4)
    p = rng.random(20_000)
    outcome = (rng.random(20_000) < p).astype(float)
    assert calibration(p, outcome).ece < 0.02
    overconfident = np.where(p > 0.5, 0.99, 0.01)
    bad = calibration(overconfident, outcome)
    assert bad.ece > 0.2
    assert [b[2] for b in bad.bins] == [int((p <= 0.5).sum()), int((p > 0.5).sum())]


def test_three_tier_row_at_target_shares_splits_by_score_quantiles() -> None:
    from routers.features import prompt_messages
    from routers.training.batch import evaluate_three_tier
    from routers.training.datasets import Example

    d, correct, cost = three_tiers(200)
    rows = [
        Example(tuple(prompt_messages("x" * (i + 1))), 0.0, 1.0, "b", "s", tiers=c, costs=k)
        for i, (c, k) in enumerate(zip(map(tuple, correct), map(tuple, cost), strict=True))
    ]
    row = evaluate_three_tier(
        "t", rows, list(d), (0.3, 0.7), bootstrap=False, shares=(0.5, 0.3, 0.2)
    )
    assert row.at_shares is not None and row.at_shares.shares == (0.5, 0.3, 0.2)
    # d is the difficulty: the easiest half small, the hardest fifth large; read backwards
    # the same shares put the hardest requests on the small tier
    backwards = evaluate_three_tier(
        "t", rows, list(-d), (0.3, 0.7), bootstrap=False, shares=(0.5, 0.3, 0.2)
    )
    assert backwards.at_shares is not None
    assert row.at_shares.accuracy > 0.95 > 0.6 > backwards.at_shares.accuracy
    assert evaluate_three_tier("t", rows, list(d), (0.3, 0.7), bootstrap=False).at_shares is None
