"""The per-tier quality model: an item-response fit that recovers abilities and difficulty,
calibrated per model, stored as plain arrays, read through ``TierQuality``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from routers.features import prompt_messages
from routers.quality import QualityFormatError, QualityModel, TierQuality
from routers.training.complexity_fit import feature_matrix
from routers.training.datasets import Example
from routers.training.quality_fit import QualityOptions, fit_quality, observations

MODELS = ("tiny", "mid", "big")
ABILITY = np.array([-1.0, 0.3, 1.6])


def synthetic(n: int, seed: int) -> tuple[list[Example], np.ndarray, np.ndarray]:
    """Items whose easiness is one direction of the vector; three models answer each."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, 16)).astype(np.float32)
    easiness = 1.5 * vectors[:, 0]
    p = 1 / (1 + np.exp(-(easiness[:, None] + ABILITY[None, :])))
    correct = (rng.random(p.shape) < p).astype(float)
    examples = [
        Example(
            tuple(prompt_messages(f"question {i}")),
            float(correct[i, 0] < 1),
            1.0,
            f"bench{i % 4}",
            "synthetic",
            scores=dict(zip(MODELS, correct[i], strict=True)),
        )
        for i in range(n)
    ]
    return examples, vectors, p


@pytest.fixture(scope="module")
def fitted() -> tuple[QualityModel, np.ndarray, np.ndarray, list[Example]]:
    examples, vectors, _ = synthetic(1500, seed=0)
    model = fit_quality(
        examples,
        vectors,
        "test-embedder",
        # these items' difficulty does not grow with length: no length prior
        QualityOptions(ladder=MODELS, l2=1.0, max_iter=300, length_prior=0.0),
    )
    test, test_vectors, truth = synthetic(800, seed=1)
    return model, test_vectors, truth, test


def test_observations_weigh_an_item_by_its_models() -> None:
    examples, _, _ = synthetic(10, seed=2)
    obs = observations(examples, QualityOptions(ladder=MODELS, power=0.5))
    assert len(obs.y) == 30 and obs.models == MODELS
    assert np.allclose(obs.weight, 1 / np.sqrt(3))


def test_recovers_the_ability_order_and_the_difficulty(fitted: tuple) -> None:
    model, vectors, truth, test = fitted
    view: TierQuality = model.for_tiers(("small", "medium", "large"))
    predicted = view.predict(vectors, feature_matrix(test))
    assert predicted.shape == (800, 3)
    assert list(np.argsort(predicted.mean(axis=0))) == [0, 1, 2]
    for t in range(3):
        assert np.corrcoef(predicted[:, t], truth[:, t])[0, 1] > 0.9
    # calibrated: mean predicted close to the mean true probability per tier
    assert np.allclose(predicted.mean(axis=0), truth.mean(axis=0), atol=0.04)
    logits = view.logits(vectors, feature_matrix(test))
    assert np.allclose(1 / (1 + np.exp(-logits)), predicted, atol=1e-6)


def test_tiers_map_to_the_ladder_by_position_or_by_name(fitted: tuple) -> None:
    model = fitted[0]
    assert model.for_tiers(("a", "b", "c")).stands_for == {"a": "tiny", "b": "mid", "c": "big"}
    assert model.for_tiers(("a", "b")).stands_for == {"a": "tiny", "b": "big"}
    assert model.for_tiers(("only",)).stands_for == {"only": "big"}
    named = model.for_tiers(("a", "b"), {"a": "mid"})
    assert named.stands_for == {"a": "mid", "b": "big"}
    with pytest.raises(QualityFormatError, match="no quality head for nope"):
        model.for_tiers(("a",), {"a": "nope"})


def test_saved_file_loads_to_the_same_predictions(fitted: tuple, tmp_path: Path) -> None:
    model, vectors, _, test = fitted
    path = tmp_path / "q.npz"
    model.save(path)
    again = QualityModel.load(path)
    assert again.models == model.models and again.ladder == model.ladder
    tiers = ("s", "m", "l")
    features = feature_matrix(test)
    assert np.array_equal(
        again.for_tiers(tiers).predict(vectors, features),
        model.for_tiers(tiers).predict(vectors, features),
    )
    (tmp_path / "bad.npz").write_bytes(b"not a model")
    with pytest.raises(QualityFormatError, match="not a quality model"):
        QualityModel.load(tmp_path / "bad.npz")


def test_the_shipped_model_loads_and_predicts_the_ladder() -> None:
    model = QualityModel.load()
    assert set(model.ladder) <= set(model.models)
    assert model.info["items"] > 5000  # every labelled prompt of the training split
    view = model.for_tiers(("small", "medium", "large"))
    q = view.predict(
        np.zeros((1, model.mean.shape[0] - 20), np.float32), np.zeros((1, 20), np.float32)
    )
    assert q.shape == (1, 3) and np.all((q > 0) & (q < 1))
