"""The refit layer over a ``TierQuality``, its time-split check, the accuracy-at-equal-cost
arithmetic, and the shadow sampler."""

from __future__ import annotations

import io

import numpy as np
import pytest

from gateway.learning.sampler import ShadowSampler, shadow_tier
from policies.feedback_spec import FeedbackConfig, JudgeSpec
from routers.classifier import ComplexityModel
from routers.features import FEATURES
from routers.refit import (
    Correction,
    LabelSet,
    RefitOptions,
    RefittedQuality,
    check_refit,
    fit_correction,
    judged,
)
from routers.tier_quality import FLOOR, Array, ComplexityQuality
from routers.training import equal_cost

TIERS = ("small", "medium", "large")
DIM = 16


class Flat:
    """A base model that knows nothing: every tier acceptable half the time."""

    tiers = TIERS

    def predict(self, vectors: Array, features: Array) -> Array:
        return np.full((len(vectors), len(self.tiers)), 0.5, np.float32)

    def logits(self, vectors: Array, features: Array) -> Array:
        return np.zeros((len(vectors), len(self.tiers)), np.float32)


def traffic(n: int, seed: int, flip: bool = False, tier: int = 0) -> LabelSet:
    """Requests of two kinds (along one direction of the embedding); the smallest tier's
    answer is acceptable for the first kind only (``flip``: the labels say the opposite)."""
    rng = np.random.default_rng(seed)
    kind = rng.random(n) < 0.5
    vectors = rng.normal(0, 0.1, (n, DIM)).astype(np.float32)
    vectors[:, 0] += np.where(kind, 1.0, -1.0)
    y = kind.astype(np.float64) if not flip else (~kind).astype(np.float64)
    return LabelSet(
        vectors,
        rng.normal(0, 1, (n, 3)).astype(np.float32),
        np.full(n, tier, np.intp),
        y,
        np.full(n, 1.0),
        np.full(n, 3.0),
    )


def joined(*parts: LabelSet) -> LabelSet:
    return LabelSet(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in LabelSet.__dataclass_fields__)
    )


def test_a_refit_learns_what_the_base_missed_and_serves() -> None:
    result = check_refit(Flat(), None, traffic(400, 1), RefitOptions(directions=4, ridge=1.0))
    assert result is not None and result.decision == "accepted", result
    assert (result.trained, result.held_out) == (300, 100)
    assert result.metrics["loss_refit"] < 0.3 < result.metrics["loss_base"]  # log 2 = 0.69
    assert result.metrics["accuracy_refit"] > 0.95
    # on the judged pairs: the base took every cheaper answer; the refit only the good ones
    assert (
        result.metrics["pairs_accuracy_refit"] > 0.95 > 0.6 > result.metrics["pairs_accuracy_base"]
    )
    refit = RefittedQuality(Flat(), result.correction)  # type: ignore[arg-type]
    fresh = traffic(50, 9)
    p = refit.predict(fresh.vectors, fresh.features)
    # no label for medium or large: the part shared by the tiers alone, the same for both
    assert np.allclose(p[:, 1], p[:, 2]) and not np.allclose(p[:, 1], 0.5)
    assert np.mean((p[:, 0] > 0.5) == (fresh.y > 0.5)) > 0.95
    # fitted each tier on its own labels: a tier without labels keeps the base's prediction
    alone = fit_correction(Flat(), traffic(300, 1), RefitOptions(4, 1.0, shared=False))
    p = RefittedQuality(Flat(), alone).predict(fresh.vectors, fresh.features)
    assert np.all(p[:, 1:] == 0.5)
    assert np.mean((p[:, 0] > 0.5) == (fresh.y > 0.5)) > 0.95


def test_a_refit_trained_on_flipped_labels_is_rolled_back() -> None:
    good = check_refit(Flat(), None, traffic(400, 1), RefitOptions(directions=4, ridge=1.0))
    assert good is not None and good.correction is not None
    # the newest quarter (the hold-out) is true, the rest was labelled the wrong way round
    poisoned = joined(traffic(300, 2, flip=True), traffic(100, 3))
    bad = check_refit(Flat(), good.correction, poisoned, RefitOptions(directions=4, ridge=1.0))
    assert bad is not None and bad.decision == "rolled_back", bad.reason
    assert bad.metrics["loss_refit"] > bad.metrics["loss_serving"]
    # the traffic changed: the newest labels say the opposite. A refit on the older ones is
    # no better than what serves, the base is: back to the base.
    drifted = joined(traffic(300, 4), traffic(100, 5, flip=True))
    options = RefitOptions(directions=4, ridge=1.0, margin=0.05)
    worse = check_refit(Flat(), good.correction, drifted, options)
    assert worse is not None and worse.decision == "reverted", worse.reason


def test_too_few_labels_to_split_is_no_refit() -> None:
    assert check_refit(Flat(), None, traffic(30, 1), RefitOptions()) is None


def test_a_correction_travels_as_plain_arrays() -> None:
    correction = fit_correction(Flat(), traffic(200, 1), RefitOptions(directions=3))
    raw = correction.to_bytes()
    with np.load(io.BytesIO(raw), allow_pickle=False) as data:  # no pickles inside
        assert set(data.files) >= {"meta", "coef", "directions"}
    again = Correction.from_bytes(raw)
    sample = traffic(20, 7)
    assert np.allclose(
        judged(RefittedQuality(Flat(), again), sample),
        judged(RefittedQuality(Flat(), correction), sample),
    )
    assert again.fitted == (200, 0, 0) and again.directions.shape == (3, DIM)
    other = Flat()
    other.tiers = ("small", "large")  # type: ignore[assignment]
    with pytest.raises(ValueError, match="refit for tiers"):
        RefittedQuality(other, again)


def test_the_complexity_model_read_per_tier() -> None:
    model = ComplexityModel.load()
    rng = np.random.default_rng(0)
    vectors = rng.normal(0, 1, (5, model.mean.shape[0] - len(FEATURES))).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    features = np.zeros((5, len(FEATURES)), np.float32)
    heads = model.probabilities(vectors, features)
    three = ComplexityQuality(model, TIERS).predict(vectors, features)
    assert three.shape == (5, 3)
    assert np.allclose(three[:, 0], np.clip(1 - heads[:, 0], FLOOR, 1 - FLOOR))
    assert np.allclose(three[:, 1], np.clip(1 - heads[:, 1], FLOOR, 1 - FLOOR))
    assert np.allclose(three[:, 2], 1 - FLOOR)  # the reference tier
    two = ComplexityQuality(model, ("cheap", "dear")).predict(vectors, features)
    assert np.allclose(two[:, 0], three[:, 0]) and np.allclose(two[:, 1], 1 - FLOOR)
    logits = ComplexityQuality(model, TIERS).logits(vectors, features)
    assert np.allclose(1 / (1 + np.exp(-logits)), three, atol=1e-6)


def test_accuracy_at_equal_cost() -> None:
    points = [(0.1, 0.5), (0.5, 0.7), (1.0, 0.8), (0.4, 0.4)]
    assert equal_cost.envelope_at(points, 0.3) == pytest.approx(0.6)  # a mix of two policies
    assert equal_cost.envelope_at(points, 2.0) == pytest.approx(0.8)
    assert np.isnan(equal_cost.envelope_at(points, 0.05))
    correct = np.array([[0, 1, 1], [1, 1, 1], [0, 0, 1]], np.float64)
    cost = np.array([[1, 2, 10], [1, 2, 10], [1, 2, 10]], np.float64)
    fixed = equal_cost.fixed_points(correct, cost)
    assert fixed == [(pytest.approx(0.1), pytest.approx(1 / 3)), (0.2, 2 / 3), (1.0, 1.0)]
    quality = np.array([[0.1, 0.9, 1.0], [0.9, 0.9, 1.0], [0.1, 0.2, 1.0]])
    tiers = equal_cost.tiers_for(quality, np.array([1.0, 2.0, 10.0]), lam=0.05)
    assert tiers.tolist() == [1, 0, 2]  # what each row needs, at 0.5 of always-large cost
    assert equal_cost.outcome(tiers, correct, cost) == (pytest.approx(13 / 30), 1.0)


def spec(**fields: object) -> FeedbackConfig:
    return FeedbackConfig(judge=JudgeSpec(tier="large"), **fields)  # type: ignore[arg-type]


def test_the_sampler_samples_classified_auto_requests_and_drops_beyond_its_bound() -> None:
    draws = iter([0.005, 0.5, 0.009, 0.001, 0.002])
    sampler = ShadowSampler(draw=lambda: next(draws))
    at_one_percent = spec(sample=0.01, max_concurrent=2)
    assert sampler.tap(at_one_percent, "auto", classified=True) is not None  # 0.005 < 0.01
    assert sampler.tap(at_one_percent, "auto", classified=True) is None  # 0.5
    assert sampler.tap(at_one_percent, "small", classified=True) is None  # a named tier
    assert sampler.tap(at_one_percent, "auto", classified=False) is None  # no score
    assert sampler.tap(None, "auto", classified=True) is None
    assert sampler.sampled == 1
    assert [sampler.admit(at_one_percent) for _ in range(3)] == [True, True, False]
    assert (sampler.in_flight, sampler.dropped) == (2, 1)
    sampler.release()
    assert sampler.admit(at_one_percent) and sampler.in_flight == 2


def test_the_shadow_tier_is_any_other_tier_evenly_by_request_id() -> None:
    tiers = ["small", "medium", "large"]
    ids = [f"chatcmpl-{i:032x}" for i in range(600)]
    for served in tiers:
        picked = [shadow_tier(tiers, served, rid) for rid in ids]
        others = [t for t in tiers if t != served]
        assert set(picked) == set(others)  # never the served tier, every other one
        assert all(abs(picked.count(t) - 300) < 60 for t in others)  # evenly
        assert picked == [shadow_tier(tiers, served, rid) for rid in ids]  # reproducible
    assert shadow_tier(["a", "b"], "a", "x") == "b" and shadow_tier(["a", "b"], "b", "x") == "a"


def test_the_feedback_loop_and_its_judge_need_a_restart_the_rest_reloads() -> None:
    from gateway.cluster.reload import _needs_restart
    from policies.schema import GatewayConfig
    from tiergate_testing.configs import fake_config

    def config(**feedback: object) -> GatewayConfig:
        raw = fake_config()
        if feedback:
            raw["routing"] = {"feedback": feedback}
        return GatewayConfig.model_validate(raw)

    off, on = config(), config(judge={"tier": "large"}, sample=0.01)
    assert _needs_restart(off, on) == ["routing.feedback.judge: changing it needs a restart"]
    assert _needs_restart(on, off) == ["routing.feedback.judge: changing it needs a restart"]
    other_judge = config(judge={"tier": "medium"}, sample=0.01)
    assert _needs_restart(on, other_judge) != []
    assert _needs_restart(on, config(judge={"tier": "large"}, sample=0.5)) == []  # reloads
