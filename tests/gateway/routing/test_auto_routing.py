"""``model: auto`` through the real gateway: the shipped classifier, the explain endpoint,
the tier header, and the event loop staying free while classification runs."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from routers.batching import MicroBatcher
from routers.classifier import ComplexityClassifier, ComplexityModel
from routers.decision import tier_for_score
from routers.features import FEATURES
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

EASY = "hi"
HARD = (
    "Prove that for every prime p > 3, p^2 - 1 is divisible by 24, then derive a closed form "
    "for the sum of the first n primes' squares modulo 24 and explain each step rigorously."
)


def classifier_config() -> dict[str, Any]:
    config = fake_config()
    config["routing"] = {"thresholds": [0.3, 0.7], "classifier": {"max_wait_ms": 1}}
    config["tenants"]["acme"]["allow_tier_header"] = True
    config["tenants"]["globex"]["max_tier"] = "medium"
    return config


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with running_gateway(classifier_config()) as running:
        yield running


def explain(
    gateway: RunningGateway, key: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/route",
        json=body,
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=30,
    )


def chat(text: str, model: str = "auto") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 3}


def test_auto_routes_by_the_score_and_reports_it(gateway: RunningGateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    scores = []
    for text in (EASY, HARD):
        raw = client.chat.completions.with_raw_response.create(**chat(text))
        score = float(raw.headers["x-tiergate-complexity"])
        assert 0.0 < score < 1.0
        assert raw.headers["x-tiergate-tier"] == tier_for_score(
            score, ["small", "medium", "large"], (0.3, 0.7)
        )
        assert raw.parse().choices[0].message.content
        scores.append(score)
    assert scores[1] > scores[0]  # a proof request scores above a greeting


def test_route_explains_without_calling_a_model(gateway: RunningGateway) -> None:
    started = sum(
        r.engine.counters.started for g in gateway.state.parts.replicas.values() for r in g
    )
    answer = explain(gateway, TEST_KEY, chat(HARD))
    assert answer.status_code == 200
    body = answer.json()
    assert set(body) >= {"tier", "model", "score", "features", "trail", "thresholds"}
    assert body["tier"] == tier_for_score(body["score"], ["small", "medium", "large"], (0.3, 0.7))
    assert body["model"] == f"fake-{body['tier']}"
    assert list(body["features"]) == list(FEATURES)
    assert body["features"]["q_solve"] == 1.0
    assert body["trail"][0].startswith(f"score {body['score']:.3f}")
    assert answer.headers["x-tiergate-complexity"] == f"{body['score']:.4f}"
    # the same text gives the same score as the real request path
    raw = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json=chat(HARD),
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    )
    assert raw.headers["x-tiergate-complexity"] == f"{body['score']:.4f}"
    after = sum(r.engine.counters.started for g in gateway.state.parts.replicas.values() for r in g)
    assert after == started + 1  # only the chat call reached an engine
    prompt = explain(gateway, TEST_KEY, {"prompt": HARD})
    assert prompt.json()["score"] == pytest.approx(body["score"], abs=1e-5)


def test_tier_header_is_obeyed_for_tenants_that_may(gateway: RunningGateway) -> None:
    raw = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json=chat(EASY),
        headers={"authorization": f"Bearer {TEST_KEY}", "x-tiergate-tier": "large"},
        timeout=30,
    )
    assert raw.status_code == 200
    assert raw.headers["x-tiergate-tier"] == "large"
    denied = explain(gateway, OTHER_KEY, chat(EASY), **{"x-tiergate-tier": "large"})
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "permission_denied"
    assert "x-tiergate-tier" in denied.json()["error"]["message"]
    unknown = explain(gateway, TEST_KEY, chat(EASY), **{"x-tiergate-tier": "gigantic"})
    assert unknown.status_code == 400
    assert unknown.json()["error"]["param"] == "x-tiergate-tier"


def test_max_tier_caps_auto(gateway: RunningGateway) -> None:
    body = explain(gateway, OTHER_KEY, chat(HARD)).json()
    assert body["tier"] in ("small", "medium")
    if body["score"] >= 0.7:
        assert any("max_tier" in step for step in body["trail"])


def test_explain_rejects_bad_bodies_in_openai_shape(gateway: RunningGateway) -> None:
    for payload in ({"model": "auto"}, {"messages": "nope"}, [1, 2]):
        answer = explain(gateway, TEST_KEY, payload)  # type: ignore[arg-type]
        assert answer.status_code == 400
        assert answer.json()["error"]["type"] == "invalid_request_error"
    assert explain(gateway, "wrong-key", chat(EASY)).status_code == 401


class SlowEmbedder:
    """The Embedder protocol over a model call that takes ``seconds`` in the worker thread."""

    dim = 384
    name = "slow"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._batcher = MicroBatcher(self.embed_sync, max_batch=8, max_wait_ms=1)

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(self.seconds)
        vectors = np.ones((len(texts), self.dim), dtype=np.float32)
        return vectors / np.sqrt(self.dim)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await self._batcher.submit(texts)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._batcher.close)


async def test_requests_interleave_while_classification_runs() -> None:
    with running_gateway(fake_config()) as gateway:
        slow = SlowEmbedder(1.0)
        gateway.swap(embedder=slow, classifier=ComplexityClassifier(ComplexityModel.load()))
        headers = {"authorization": f"Bearer {TEST_KEY}"}
        async with httpx.AsyncClient(base_url=gateway.base_url, headers=headers, timeout=30) as c:
            started = time.perf_counter()
            auto = asyncio.create_task(c.post("/v1/chat/completions", json=chat(HARD)))
            await asyncio.sleep(0.2)
            quick = []
            for _ in range(5):
                t0 = time.perf_counter()
                named = await c.post("/v1/chat/completions", json=chat(EASY, "small"))
                assert named.status_code == 200
                quick.append(time.perf_counter() - t0)
            assert not auto.done()  # the classification is still running...
            assert max(quick) < 0.5  # ...and other requests were served meanwhile
            response = await auto
            assert response.status_code == 200
            assert "x-tiergate-complexity" in response.headers
            assert time.perf_counter() - started >= 1.0
        gateway.call(slow.aclose())


def test_missing_embedder_package_falls_back_to_the_default_tier(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed...
    shadow = tmp_path / "onnxruntime"  # ...here and in the embedder worker it starts
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('No module named onnxruntime')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = classifier_config()
    config["tenants"]["acme"]["default_tier"] = "medium"
    with caplog.at_level("ERROR"), running_gateway(config) as gateway:
        assert gateway.state.parts.router.classifier is None
        assert any("classifier unavailable" in note for note in gateway.state.notes)
        body = explain(gateway, TEST_KEY, chat(HARD)).json()
        assert body["tier"] == "medium"
        assert body["score"] is None
        assert "no classifier loaded" in body["trail"][0]
    assert any("onnxruntime" in r.getMessage() for r in caplog.records)


def test_default_config_routes_auto_with_the_shipped_classifier() -> None:
    from policies.loader import load_config
    from routers.setup import build_routing
    from tests.support import REPO

    spec = load_config(REPO / "config" / "gateway.yaml").routing.classifier
    assert spec is not None
    built = build_routing(spec)
    try:
        # the shipped model was trained on exactly this embedder's vectors
        assert built.embedder.name == built.classifier.model.embedder
        scores = built.classifier.classify_many(
            [[{"role": "user", "content": HARD}]], [HARD], built.embedder.embed_sync([HARD])
        )
        assert 0.0 < scores[0].score < 1.0
    finally:
        asyncio.run(built.embedder.aclose())


def test_semantic_cache_and_classifier_share_one_embedder() -> None:
    from routers.embed_cache import CachedEmbedder
    from routers.embed_worker import ProcessEmbedder

    config = classifier_config()
    config["cache"] = {"semantic": True}
    with running_gateway(config) as gateway:
        assert gateway.state.parts.cache is not None
        shared = gateway.state.parts.router.embedder
        assert isinstance(shared, CachedEmbedder)  # not a second (torch) embedder
        embedder = shared.inner
        assert isinstance(embedder, ProcessEmbedder)
        before = embedder.batcher.texts
        answer = explain(gateway, TEST_KEY, chat(HARD))
        assert answer.status_code == 200 and answer.json()["score"] is not None
        assert embedder.batcher.texts == before + 1
        # a cacheable chat request: semantic lookup, classification and fill, one embedding
        body = {**chat(HARD + " (again)"), "temperature": 0}
        headers = {"authorization": f"Bearer {TEST_KEY}"}
        done = httpx.post(gateway.base_url + "/v1/chat/completions", json=body, headers=headers)
        assert done.status_code == 200
        assert done.headers["x-tiergate-cache"] == "miss"
        assert "x-tiergate-complexity" in done.headers
        assert embedder.batcher.texts == before + 2


def classifications(gateway: RunningGateway) -> float:
    text = httpx.get(gateway.base_url + "/metrics").text
    (count,) = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "tiergate_classifier_duration_seconds_count"
    ]
    return count


def test_classifier_latency_counts_each_auto_request_and_an_exact_hit_skips_it(
    gateway: RunningGateway,
) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    before = classifications(gateway)
    for text in ("count me one", "count me two", HARD):
        client.chat.completions.create(**chat(text))
    client.chat.completions.create(**chat("named tiers are not classified", model="small"))
    assert classifications(gateway) - before == 3

    # Cacheable (temperature 0): the first is classified and stored, the repeat is
    # answered from the exact cache without classifying.
    body = {**chat("cache me exactly please"), "temperature": 0}
    first = client.chat.completions.with_raw_response.create(**body)
    assert first.headers["x-tiergate-cache"] == "miss"
    assert "x-tiergate-complexity" in first.headers
    repeat = client.chat.completions.with_raw_response.create(**body)
    assert repeat.headers["x-tiergate-cache"] == "exact"
    assert "x-tiergate-complexity" not in repeat.headers
    assert repeat.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert classifications(gateway) - before == 4
