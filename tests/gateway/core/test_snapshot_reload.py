"""A policy reload lands while a request waits in the classifier: that request is routed,
refused or served, and priced by the policy it was admitted under (its snapshot); the
next request runs wholly on the new one.

The classifier is a fake of the ``Classifier`` protocol that holds the request until the
test lets it go. The reload changes prices, part pricing and a tenant rule at once: under
the new policy the waiting request (an image, scored for the large tier) would be held to
the small tier by ``max_tier``, its image could not be priced on any tier (a 400), and
its reservation would pass the tenant's budget (a 429).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
import yaml

from policies.loader import load_config
from routers.classifier import ComplexityScore
from routers.embedding import EmbeddingOnce
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

ADMIN_KEY = "tg-admin-key-for-snapshot-tests"
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
PICTURE = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, IMAGE]}]
WORDS = [{"role": "user", "content": "Say something."}]
OLD_LARGE = {"input": 10.0, "output": 20.0}
NEW_LARGE = {"input": 1000.0, "output": 2000.0}
NEW_SMALL = {"input": 0.5, "output": 0.7}


class HeldClassifier:
    """Scores every request ``score``, after waiting for ``release`` (set from the test)."""

    def __init__(self, score: float) -> None:
        self.score = score
        self.entered = threading.Event()
        self.release = threading.Event()

    async def classify(
        self,
        messages: Sequence[Mapping[str, Any]],
        embedding: EmbeddingOnce,
        quality: object = None,
    ) -> ComplexityScore:
        self.entered.set()
        await asyncio.to_thread(self.release.wait, 30)
        return ComplexityScore(self.score, None, {})


class UnitEmbedder:
    """The same unit vector for every text (the classifier above ignores it)."""

    dim = 8

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.full((len(texts), self.dim), 1 / np.sqrt(self.dim), dtype=np.float32)

    async def aclose(self) -> None:
        return None


def policy(new: bool) -> dict[str, Any]:
    config = fake_config()
    config["admin"] = {"key_from_env": "TIERGATE_SNAPSHOT_ADMIN_KEY"}
    for engine in config["engines"].values():
        engine["modalities"] = ["text", "image"]
    acme = config["tenants"]["acme"]
    acme["budget"] = {"limit_usd": 0.5, "window": "daily"}
    if new:
        config["prices"]["fake-large"] = NEW_LARGE
        config["prices"]["fake-small"] = NEW_SMALL
        acme["max_tier"] = "small"
    else:
        config["prices"]["fake-large"] = OLD_LARGE
        config["budgets"] = {"part_tokens": {"fake-large": {"image": {}}}}
    return config


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[RunningGateway, Path]]:
    os.environ["TIERGATE_SNAPSHOT_ADMIN_KEY"] = ADMIN_KEY
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(policy(new=False)))
    with running_gateway(load_config(path), lambda: load_config(path)) as running:
        yield running, path


def chat(base_url: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(
        base_url + "/v1/chat/completions",
        json={"model": "auto", "messages": messages, "max_tokens": 8},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=60,
    )


def cost(price: Mapping[str, float], usage: Mapping[str, int]) -> float:
    return (
        usage["prompt_tokens"] * price["input"] + usage["completion_tokens"] * price["output"]
    ) / 1e6


def test_a_request_waiting_in_the_classifier_keeps_its_admission_policy(
    gateway: tuple[RunningGateway, Path],
) -> None:
    running, path = gateway
    classifier = HeldClassifier(score=0.9)  # the large tier, by the thresholds (0.3, 0.7)
    running.swap(classifier=classifier, embedder=UnitEmbedder())
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(chat, running.base_url, PICTURE)
        assert classifier.entered.wait(30), "the request never reached the classifier"
        path.write_text(yaml.safe_dump(policy(new=True)))
        reloaded = httpx.post(
            running.base_url + "/admin/api/policies/reload",
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
            timeout=10,
        )
        assert reloaded.status_code == 200, reloaded.text
        assert running.state.config.tenants["acme"].max_tier == "small"
        assert not waiting.done()  # still in the classifier while the new policy is live
        classifier.release.set()
        answer = waiting.result(60)
    # Routed, admitted and priced by the old policy, to the end.
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-tiergate-tier"] == "large"
    assert answer.headers["x-tiergate-model"] == "fake-large"
    usage = answer.json()["usage"]
    charged = float(answer.headers["x-tiergate-cost-usd"])
    assert charged == pytest.approx(cost(OLD_LARGE, usage), abs=1e-8)
    assert charged != pytest.approx(cost(NEW_LARGE, usage), abs=1e-8)
    event = ledger_event(running, answer.headers["x-request-id"])
    assert (event.tier, event.model, event.status) == ("large", "fake-large", "ok")
    assert event.cost_usd == pytest.approx(cost(OLD_LARGE, usage))
    # The next request runs wholly on the new policy: held to small, at its new price;
    # the image it can no longer price is refused before anything runs.
    after = chat(running.base_url, WORDS)
    assert after.status_code == 200, after.text
    assert after.headers["x-tiergate-tier"] == "small"
    new_cost = float(after.headers["x-tiergate-cost-usd"])
    assert new_cost == pytest.approx(cost(NEW_SMALL, after.json()["usage"]), abs=1e-8)
    refused = chat(running.base_url, PICTURE)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "unsupported_content"


def ledger_event(running: RunningGateway, request_id: str) -> Any:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the settlement is a task of its own
        now = time.time()
        events = running.call(running.state.parts.money.ledger.events(now - 600, now + 60))
        found = [e for e in events if e.request_id == request_id]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no ledger event for {request_id}")
