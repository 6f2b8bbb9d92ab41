"""The regional signal check: regions of the training prompts, recalibrated on their
out-of-family logits, and no ranking where a tier's model has no evidence."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from routers.quality import QualityModel
from routers.quality_regions import Observed, fit_regions, spherical_kmeans
from routers.training.complexity_fit import feature_matrix
from routers.training.quality_fit import QualityOptions, fit_quality
from tests.routers.test_quality import MODELS, synthetic


def two_topics(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectors around two orthogonal directions (two topics), and the topic of each."""
    rng = np.random.default_rng(seed)
    topic = np.arange(n) % 2
    vectors = rng.normal(scale=0.1, size=(n, 8))
    vectors[topic == 0, 0] += 1.0
    vectors[topic == 1, 1] += 1.0
    return vectors, topic


def test_kmeans_finds_the_topics_deterministically() -> None:
    vectors, topic = two_topics(400, seed=0)
    first = spherical_kmeans(vectors, 2)
    assert np.array_equal(first, spherical_kmeans(vectors, 2))
    assigned = np.argmax(vectors @ first.T, axis=1)
    assert len({(t, a) for t, a in zip(topic, assigned, strict=True)}) == 2


def test_a_region_without_evidence_for_a_tier_predicts_its_level_for_every_request() -> None:
    vectors, topic = two_topics(600, seed=1)
    rng = np.random.default_rng(2)
    easiness = rng.normal(size=600)
    logits = np.column_stack([easiness - 0.5, easiness + 1.0])  # two models' logits
    items = np.arange(600)
    # model 0 answered both topics, model 1 only topic 0: its evidence is topic 0 alone
    rows = [(i, m) for i in items for m in (0, 1) if m == 0 or topic[i] == 0]
    item = np.asarray([r[0] for r in rows])
    model = np.asarray([r[1] for r in rows])
    p = 1 / (1 + np.exp(-logits[item, model]))
    y = (rng.random(len(p)) < p).astype(float)
    observed = Observed(item, model, y, np.full(len(y), 0.5), logits[item, model])
    regions, fits = fit_regions(vectors, items, logits, observed, 2, prior=10.0)
    region = regions.assign(vectors.astype(np.float32))
    zero = int(np.bincount(region[topic == 0]).argmax())
    assert fits[zero].evidence[1] > 10 and fits[1 - zero].evidence[1] == 0
    assert regions.known([0]).all() and regions.known([0, 1]).tolist() == [
        r == zero for r in range(2)
    ]
    out = regions.apply(logits.astype(np.float32), region, [0, 1])
    # the region with evidence keeps the ranking (slope near 1: the logits are the truth)
    assert 0.7 < fits[zero].slope < 1.3
    assert np.corrcoef(out[region == zero, 1], logits[region == zero, 1])[0, 1] > 0.99
    # the other: one prediction per tier for every request, each tier's mean logit there
    other = region == 1 - zero
    assert np.ptp(out[other], axis=0).max() < 1e-5
    assert np.allclose(out[other][0], logits[other].mean(axis=0), atol=1e-4)
    # a view of model 0 alone has evidence everywhere: ranked in both regions
    alone = regions.apply(logits[:, :1].astype(np.float32), region, [0])
    assert np.ptp(alone[other]) > 1.0


def test_a_model_with_regions_saves_and_loads_the_same_predictions(tmp_path: Path) -> None:
    examples, vectors, _ = synthetic(600, seed=3)
    options = QualityOptions(ladder=MODELS, l2=1.0, length_prior=0.0, regions=3)
    model = fit_quality(examples, vectors, "test-embedder", options)
    assert model.regions is not None and len(model.info["regions"]) == 3
    model.save(tmp_path / "q.npz")
    loaded = QualityModel.load(tmp_path / "q.npz")
    features = feature_matrix(examples)
    view, again = model.for_tiers(("s", "m", "l")), loaded.for_tiers(("s", "m", "l"))
    assert np.allclose(view.predict(vectors, features), again.predict(vectors, features))
    assert np.allclose(view.reference_logits(), again.reference_logits())
