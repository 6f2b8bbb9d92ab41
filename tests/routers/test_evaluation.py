"""RouteLLM's metrics on routers whose answer is known by construction."""

from __future__ import annotations

import numpy as np

from routers.evaluation import QUANTILES, pgr_curve, random_report, report


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
