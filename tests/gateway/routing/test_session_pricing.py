"""The cached-prefix price of a session's turn: docs/classifier.md's worked example, at the
hosted-model prices it is written with (the shipped config with those prices put in)."""

from __future__ import annotations

import pytest
import yaml

from policies.loader import parse_config
from policies.schema import GatewayConfig
from routers.session_policy import keep_or_switch, values
from routers.tier_costs import expected_costs, prefix_costs
from tests.support import REPO

TIERS = ("small", "medium", "large")
LAM = 0.1487  # the reference traffic's λ for {quality: 0.95} at the example's prices
# The example's prices: medium and large priced like hosted 8B and 70B models.
EXAMPLE_PRICES = {
    "small": {"input": 0.02, "cached_input": 0.01, "output": 0.04},
    "medium": {"input": 0.18, "cached_input": 0.09, "output": 0.18},
    "large": {"input": 0.88, "cached_input": 0.44, "output": 0.88},
}


def example_config() -> GatewayConfig:
    raw = yaml.safe_load((REPO / "config" / "gateway.yaml").read_text())
    for tier, price in EXAMPLE_PRICES.items():
        (engine,) = raw["tiers"][tier]["engines"]
        raw["prices"][raw["engines"][engine]["model"]] = price
    return parse_config(yaml.safe_dump(raw, sort_keys=False), "gateway.yaml")


def test_the_worked_example() -> None:
    config = example_config()
    objective = config.routing.objective
    assert objective is not None
    # turn 1: the task decides medium
    task = expected_costs(config, objective, 600)
    first = values((0.76, 0.80, 0.91), task, task[-1], LAM)
    assert first[1] == pytest.approx(0.7696, abs=1e-4) and first[1] > first[2]
    # turn 4: 12,000 characters, the last turn's 10,000 cached on medium
    cold = expected_costs(config, objective, 12_000)
    warm = prefix_costs(config, objective, 12_000, {"medium": 10_000})
    assert [round(c * 1e6, 1) for c in cold] == [70.4, 587.5, 2872.3]
    assert [round(c * 1e6, 1) for c in warm] == [70.4, 362.5, 2872.3]  # only medium's falls
    quality = (0.74, 0.78, 0.90)
    alone = keep_or_switch(TIERS, "medium", quality, cold, cold[-1], LAM, [1, 2])
    kept = keep_or_switch(TIERS, "medium", quality, warm, cold[-1], LAM, [1, 2])
    assert alone.moved and alone.tier == "large" and "+0.0017" in alone.reason
    assert not kept.moved and "large -0.0099" in kept.reason
    assert values(quality, warm, cold[-1], LAM)[1] == pytest.approx(0.7612, abs=1e-4)


def test_a_cached_prefix_never_exceeds_the_context() -> None:
    config = example_config()
    objective = config.routing.objective
    assert objective is not None
    whole = prefix_costs(config, objective, 4_000, {"large": 4_000})
    beyond = prefix_costs(config, objective, 4_000, {"large": 40_000})
    assert whole == beyond
    # everything cached: the prompt's 8 overhead tokens at full price, the rest cached
    tokens = 4_000 / 4 + 8
    expected = (8 * 0.88 + (tokens - 8) * 0.44 + 256 * 0.88) / 1e6
    assert whole[2] == pytest.approx(expected)
