"""Thresholds and policy rules: score → tier, then min/max, allowed tiers, header, budget."""

from __future__ import annotations

from typing import Any

import pytest

from policies.schema import GatewayConfig
from routers.decision import (
    TierNotAllowed,
    UnknownModel,
    UnknownTier,
    decide,
    tier_for_score,
)
from tiergate_testing.configs import fake_config


def config(**tenant: Any) -> GatewayConfig:
    raw = fake_config()
    raw["tenants"]["acme"].update(tenant)
    return GatewayConfig.model_validate(raw)


TIERS = ["small", "medium", "large"]


@pytest.mark.parametrize(
    ("score", "tier"),
    [
        (0.0, "small"),
        (0.299, "small"),
        (0.3, "medium"),
        (0.699, "medium"),
        (0.7, "large"),
        (1.0, "large"),
    ],
)
def test_thresholds_split_three_tiers(score: float, tier: str) -> None:
    assert tier_for_score(score, TIERS, (0.3, 0.7)) == tier


def test_two_tiers_use_the_high_threshold_for_the_last() -> None:
    assert tier_for_score(0.5, ["small", "large"], (0.3, 0.7)) == "large"
    assert tier_for_score(0.2, ["small", "large"], (0.3, 0.7)) == "small"


def test_auto_uses_the_score_and_records_it() -> None:
    cfg = config()
    decision = decide(cfg, cfg.tenants["acme"], "auto", 0.8)
    assert (decision.tier, decision.score, decision.movable) == ("large", 0.8, True)
    assert "0.800" in decision.trail[0]


def test_auto_without_score_takes_the_tenant_default() -> None:
    cfg = config(default_tier="medium")
    decision = decide(cfg, cfg.tenants["acme"], "auto", None)
    assert decision.tier == "medium"
    assert "default tier" in decision.trail[0]


def test_min_and_max_tier_clamp_auto() -> None:
    cfg = config(min_tier="medium", max_tier="medium")
    low = decide(cfg, cfg.tenants["acme"], "auto", 0.05)
    high = decide(cfg, cfg.tenants["acme"], "auto", 0.95)
    assert low.tier == high.tier == "medium"
    assert any("min_tier" in step for step in low.trail)
    assert any("max_tier" in step for step in high.trail)


def test_allowed_tiers_pick_the_nearest_below_then_the_cheapest_allowed() -> None:
    cfg = config(allowed_tiers=["small", "medium"])
    assert decide(cfg, cfg.tenants["acme"], "auto", 0.9).tier == "medium"
    cfg = config(allowed_tiers=["large"])
    assert decide(cfg, cfg.tenants["acme"], "auto", 0.1).tier == "large"


def test_explicit_tier_or_model_outside_the_policy_is_refused() -> None:
    cfg = config(max_tier="medium")
    with pytest.raises(TierNotAllowed):
        decide(cfg, cfg.tenants["acme"], "large")
    with pytest.raises(TierNotAllowed):
        decide(cfg, cfg.tenants["acme"], "fake-large")
    pinned = decide(cfg, cfg.tenants["acme"], "fake-medium")
    assert (pinned.tier, pinned.pinned_model, pinned.movable) == ("medium", "fake-medium", False)
    with pytest.raises(UnknownModel):
        decide(cfg, cfg.tenants["acme"], "gpt-17")


def test_header_forces_a_tier_only_when_the_tenant_may() -> None:
    cfg = config()
    with pytest.raises(TierNotAllowed):
        decide(cfg, cfg.tenants["acme"], "auto", 0.1, forced_tier="large")
    cfg = config(allow_tier_header=True, allowed_tiers=["small", "large"])
    forced = decide(cfg, cfg.tenants["acme"], "auto", 0.1, forced_tier="large")
    assert (forced.tier, forced.movable) == ("large", False)
    with pytest.raises(TierNotAllowed):
        decide(cfg, cfg.tenants["acme"], "auto", 0.1, forced_tier="medium")
    with pytest.raises(UnknownTier):
        decide(cfg, cfg.tenants["acme"], "auto", 0.1, forced_tier="huge")
    named = decide(cfg, cfg.tenants["acme"], "small", None, forced_tier="large")
    assert named.tier == "small"
    assert "ignored" in named.trail[0]


def test_min_above_max_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="min_tier is above max_tier"):
        config(min_tier="large", max_tier="small")


def test_budget_downgrade_in_spend_respects_min_and_allowed_tiers() -> None:
    from gateway.money.spend import downgrade_tiers

    cfg = config(min_tier="medium")
    assert downgrade_tiers(cfg, cfg.tenants["acme"], "large") == ["large", "medium"]
    cfg = config(allowed_tiers=["small", "large"])
    assert downgrade_tiers(cfg, cfg.tenants["acme"], "large") == ["large", "small"]
