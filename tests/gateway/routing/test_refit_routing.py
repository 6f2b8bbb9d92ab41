"""Routing reads the feedback loop's serving model once per request, through a real gateway.

The classifier is a fake of the ``Classifier`` protocol that records the per-tier model it
is handed and can hold the request until the test lets it go. A refit swapped in while a
request waits there does not reach that request (it was routed by the model it read at
routing); the next request is routed by the new one, and ``/v1/route`` names it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from routers.classifier import ComplexityScore
from routers.embedding import EmbeddingOnce
from routers.features import FEATURES
from routers.quality import TierQuality
from routers.tier_quality import ServedQuality
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

Array = npt.NDArray[np.float32]
TIERS = ("small", "medium", "large")


class Constant:
    """A per-tier model predicting the same for every request (told apart by identity)."""

    tiers = TIERS

    def __init__(self, p: float) -> None:
        self.p = p

    def predict(self, vectors: Array, features: Array) -> Array:
        return np.full((len(vectors), 3), self.p, np.float32)

    def logits(self, vectors: Array, features: Array) -> Array:
        return np.log(self.predict(vectors, features) / (1 - self.predict(vectors, features)))


class RecordingClassifier:
    """Scores 0.9; records the per-tier model each request is classified with, and holds
    a request until ``release`` is set."""

    def __init__(self) -> None:
        self.handed: list[TierQuality | None] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    async def classify(
        self,
        messages: Sequence[Mapping[str, Any]],
        embedding: EmbeddingOnce,
        quality: TierQuality | None = None,
    ) -> ComplexityScore:
        self.handed.append(quality)
        self.entered.set()
        await asyncio.to_thread(self.release.wait, 30)
        per_tier = None if quality is None else (0.5, 0.6, 0.9)
        features = dict.fromkeys(FEATURES, 0.0)  # the feedback record keeps all of them
        return ComplexityScore(0.9, None, features, quality=per_tier)


class UnitEmbedder:
    dim = 8

    async def embed(self, texts: Sequence[str]) -> Array:
        return np.full((len(texts), self.dim), 1 / np.sqrt(self.dim), dtype=np.float32)

    async def aclose(self) -> None:
        return None


@pytest.fixture
def gateway() -> Iterator[RunningGateway]:
    config = fake_config()
    config["routing"] = {
        "classifier": {"max_wait_ms": 1},
        "feedback": {"sample": 0.0, "judge": {"tier": "large"}, "refit": {"online": False}},
    }
    with running_gateway(config) as running:
        yield running


def post(base_url: str, path: str) -> httpx.Response:
    return httpx.post(
        base_url + path,
        json={"model": "auto", "messages": [{"role": "user", "content": "Say something."}]},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=60,
    )


def test_a_refit_swapped_in_mid_request_does_not_reach_it(gateway: RunningGateway) -> None:
    feedback = gateway.state.parts.feedback
    assert feedback is not None
    classifier = RecordingClassifier()
    gateway.swap(classifier=classifier, embedder=UnitEmbedder())
    old, new = Constant(0.3), Constant(0.7)
    feedback.refitter.current = ServedQuality(old, 1, refit=True)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(post, gateway.base_url, "/v1/chat/completions")
        assert classifier.entered.wait(30), "the request never reached the classifier"
        feedback.refitter.current = ServedQuality(new, 2, refit=True)  # a refit swap lands
        classifier.release.set()
        answer = waiting.result(60)
    assert answer.status_code == 200, answer.text
    assert classifier.handed == [old]  # routed by the model it read when it was routed
    explained = post(gateway.base_url, "/v1/route")
    assert explained.status_code == 200, explained.text
    assert classifier.handed == [old, new]  # the next request reads the new one
    body = explained.json()
    assert body["quality_model"] == {"model": "refit", "version": 2}
    assert body["quality"] == {"small": 0.5, "medium": 0.6, "large": 0.9}


def test_without_a_refit_routing_reads_the_base_and_says_so(gateway: RunningGateway) -> None:
    feedback = gateway.state.parts.feedback
    assert feedback is not None and feedback.refitter.current is not None
    base = feedback.refitter.current
    assert base.refit is False and base.quality is feedback.refitter.base
    classifier = RecordingClassifier()
    classifier.release.set()
    gateway.swap(classifier=classifier, embedder=UnitEmbedder())
    body = post(gateway.base_url, "/v1/route").json()
    assert classifier.handed == [base.quality]
    assert body["quality_model"]["model"] == "base"
