"""Batch prices: a batch line reserves and pays its model's ``prices.MODEL.batch`` share of
the interactive price (half unless set), the rest is ``saved_batch_usd`` on its outcome
and its ledger event, which says ``batch``; routing and cache savings stay at
interactive prices."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backends.base import GenerationRequest, SamplingParams, Usage
from gateway.money.outcome import conclude, embedding_outcome
from gateway.money.spend import model_cost, worst_cases
from gateway.types import Charges, Progress
from policies.schema import GatewayConfig
from policies.stores.ledger import SpendEvent
from policies.tenants import Principal
from tiergate_testing.configs import fake_config

USAGE = Usage(prompt_tokens=1000, completion_tokens=500)


def config(**large: float) -> GatewayConfig:
    raw = fake_config()
    raw["prices"]["fake-large"] = {"input": 10.0, "output": 20.0, **large}
    return GatewayConfig.model_validate(raw)


def test_a_batch_line_pays_the_models_batch_share() -> None:
    half, quarter = config(), config(batch=0.25)
    interactive = model_cost(half, "fake-large", USAGE)
    assert interactive == pytest.approx((1000 * 10 + 500 * 20) / 1e6)
    assert model_cost(half, "fake-large", USAGE, batch=True) == pytest.approx(interactive / 2)
    assert model_cost(quarter, "fake-large", USAGE, batch=True) == pytest.approx(interactive / 4)
    with pytest.raises(ValidationError):
        config(batch=1.5)


def test_the_reservation_is_at_the_batch_price() -> None:
    cfg = config()
    ask = GenerationRequest("r", "large", SamplingParams(max_tokens=64), prompt="hello")
    interactive = worst_cases(cfg, ["large"], ask, None)[0]
    batch = worst_cases(cfg, ["large"], ask, None, batch=True)[0]
    assert batch.usd == pytest.approx(interactive.usd / 2)
    assert batch.completion_tokens == interactive.completion_tokens


def test_the_outcome_and_its_ledger_event_say_batch() -> None:
    cfg = config()
    progress = Progress("large", "fake-large", (), dispatched=True, usage=USAGE, run_cap=500)
    charges = Charges(prompt_upper=1000, hit_charge=0.0)
    kwargs = {"error": None, "denied": None, "latency_s": 0.1, "classify_s": None}
    plain = conclude(cfg, progress, charges, **kwargs)  # type: ignore[arg-type]
    batch = conclude(cfg, progress, charges, batch=True, **kwargs)  # type: ignore[arg-type]
    assert batch.cost_usd == pytest.approx(plain.cost_usd / 2)
    assert batch.saved_batch_usd == pytest.approx(plain.cost_usd / 2)
    assert batch.saved_routing_usd == plain.saved_routing_usd and plain.saved_batch_usd == 0
    principal = Principal("acme", "acme-1", cfg.tenants["acme"])
    event = batch.ledger_event("chatcmpl-1", principal, downgraded=False)
    assert event.batch and event.saved_batch_usd == pytest.approx(batch.saved_batch_usd)
    assert SpendEvent.from_fields(event.to_fields()) == event  # what Redis keeps
    sums = event.increments()
    assert sums["batch_requests"] == 1 and sums["batch_cost_usd"] == event.cost_usd
    assert sums["saved_batch_usd"] == pytest.approx(batch.saved_batch_usd)
    assert "batch_requests" not in plain.ledger_event("x", principal, False).increments()
    embedded = embedding_outcome(
        cfg, "fake-large", Usage(1000, 0), error=None, denied=None, latency_s=0.0, batch=True
    )
    assert embedded.cost_usd == pytest.approx(0.005) and embedded.saved_batch_usd == pytest.approx(
        0.005
    )
