"""The feedback loop end to end on real servers: two gateway processes (``python -m gateway
serve``) sharing one Redis, the shipped classifier and ``target_share``, the fake engines.

Traffic is replayed from the three-tier held-out rows of ``data/routing`` (RouterBench's
MBPP and Winogrande, never trained on), whose per-tier correctness and cost are known;
every request gets a shadow answer and the judge that knows each row's label labels the
pair. Three phases, each waiting for the last one's labels:

A. 400 rows, true labels: the online refit (at 400 labels) is accepted and both replicas
   serve it;
B. 300 rows whose labels are deliberately flipped, then C. 100 true ones: the next refit
   (trained on the flipped ones, checked on the newest, true ones) is rolled back;
then on the rows not replayed, the refitted model under the cost rule beats the shipped
policy (``target_share`` 70/20/10, as each replica routes now) at equal cost.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from policies.feedback_redis import RedisFeedbackStore
from policies.schema import ClassifierConfig
from policies.store_redis import RedisStore
from routers import datasets, equal_cost
from routers.classifier import ComplexityModel
from routers.embedders import build_embedder
from routers.features import text_features
from routers.offline import cached_embed, embedding_cache_path, three_tier_set
from routers.refit import Correction, RefittedQuality
from routers.tier_quality import ComplexityQuality
from tests.redis_servers import REDIS7_URL, delete_prefix, unique_root
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import GatewayProcess, subprocess_env

pytestmark = pytest.mark.slow

ADMIN_KEY = "tg-admin-key-for-feedback-replay"
TIERS = ("small", "medium", "large")
SHARES = {"small": 0.7, "medium": 0.2, "large": 0.1}
CLEAN_A, FLIPPED_B, CLEAN_C = 400, 300, 100
REPLAYED = CLEAN_A + FLIPPED_B + CLEAN_C
MARGIN = 0.03  # accuracy over the shipped policy at its cost, asserted


def rows() -> list[datasets.Example]:
    """The three-tier held-out rows, one per distinct prompt, in a fixed random order."""
    seen: dict[str, datasets.Example] = {}
    for example in three_tier_set(datasets.shared_splits()):
        seen.setdefault(example.text.strip(), example)
    ordered = sorted(seen.values(), key=lambda e: e.text)
    random.Random(24).shuffle(ordered)
    return ordered


def flipped(small: float, medium: float, large: float) -> tuple[float, float, float]:
    """Correctness values whose every verdict is the opposite of the true ones': the judge
    finds a cheaper answer acceptable when it is at least as right as the one it is compared
    with, and pairs are (small, medium) or (medium, large)."""
    return (1.0 if small < medium else 0.0), 0.5, (0.0 if medium < large else 1.0)


def judge_file(path: Path, examples: list[datasets.Example]) -> None:
    """What the judge knows: each row's per-tier correctness, phase B's flipped."""
    with path.open("w") as out:
        for i, example in enumerate(examples):
            assert example.tiers is not None
            known = example.tiers
            if CLEAN_A <= i < CLEAN_A + FLIPPED_B:
                known = flipped(*known)
            tiers = dict(zip(TIERS, known, strict=True))
            out.write(json.dumps({"prompt": example.text, "tiers": tiers}) + "\n")


@contextmanager
def two_replicas(tmp: Path, labels: Path) -> Iterator[tuple[list[str], str]]:
    root = unique_root()
    raw: dict[str, Any] = fake_config()
    raw.update(redis_url=REDIS7_URL, redis_prefix=root, redis_timeout_s=5.0)
    raw["admin"] = {"key_from_env": "TIERGATE_ADMIN_KEY"}
    raw["tenants"]["acme"]["cache"] = {"enabled": False}  # every request is classified
    raw["routing"] = {
        "classifier": {"max_wait_ms": 1},
        "target_share": SHARES,
        "target": {"min_samples": 200, "sync_s": 0.2},
        "feedback": {
            "sample": 1.0,
            "judge": {"labels": str(labels)},
            "max_concurrent": 64,
            "record_flush_s": 0.1,
            "max_labels": CLEAN_A,  # the window a refit sees: the newest 400 labels
            "refit": {"min_labels": CLEAN_A, "every": CLEAN_A, "check_s": 0.3},
        },
    }
    env = subprocess_env(
        TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_ADMIN_KEY=ADMIN_KEY, TIERGATE_LOG_LEVEL="warning"
    )
    replicas = [GatewayProcess(raw, tmp, name=f"replica-{i}", env=env) for i in range(2)]
    try:
        for replica in replicas:
            replica.spawn()
        for replica in replicas:
            replica.wait_ready(timeout_s=120)
        yield [r.base_url for r in replicas], root
    finally:
        for replica in replicas:
            replica.stop()
        delete_prefix(REDIS7_URL, root)


async def replay(urls: list[str], prompts: list[str]) -> None:
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    gate = asyncio.Semaphore(8)
    async with httpx.AsyncClient(headers=headers, timeout=120) as client:

        async def one(i: int, prompt: str) -> None:
            body = {"model": "auto", "messages": [{"role": "user", "content": prompt}]}
            async with gate:
                got = await client.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=body)
            assert got.status_code == 200, got.text

        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))


async def shipped_tiers(url: str, prompts: list[str]) -> list[int]:
    """The tier each prompt gets from the policy a replica routes by now (``/v1/route``)."""
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    gate = asyncio.Semaphore(8)
    async with httpx.AsyncClient(headers=headers, timeout=120) as client:

        async def one(prompt: str) -> int:
            body = {"model": "auto", "messages": [{"role": "user", "content": prompt}]}
            async with gate:
                got = await client.post(f"{url}/v1/route", json=body)
            assert got.status_code == 200, got.text
            assert any("target_share quantiles" in s for s in got.json()["trail"])
            return TIERS.index(got.json()["tier"])

        return list(await asyncio.gather(*(one(p) for p in prompts)))


def overview(url: str) -> dict[str, Any]:
    got = httpx.get(
        f"{url}/admin/api/feedback", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
    )
    assert got.status_code == 200, got.text
    body: dict[str, Any] = got.json()
    return body


def wait_until(url: str, what: str, check: Any, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = overview(url)
        if check(found):
            return found
        assert time.monotonic() < deadline, f"{what}: {found}"
        time.sleep(0.2)


def labels_ever(body: dict[str, Any]) -> int:
    return sum(row["count"] for row in body["labels"]["ever"])


def serving_model(root: str) -> tuple[int, bytes | None]:
    async def read() -> tuple[int, bytes | None]:
        store = RedisStore(REDIS7_URL, root=root)
        try:
            return await RedisFeedbackStore(store).serving()
        finally:
            await store.aclose()

    return asyncio.run(read())


def test_refit_from_replayed_traffic_beats_the_shipped_policy_and_a_bad_one_rolls_back(
    tmp_path: Path,
) -> None:
    examples = rows()
    prompts = [e.text for e in examples]
    labels = tmp_path / "known-labels.jsonl"
    judge_file(labels, examples)
    held_out = examples[REPLAYED:]
    started = time.monotonic()
    with two_replicas(tmp_path, labels) as (urls, root):
        a, b = urls
        asyncio.run(replay(urls, prompts[:CLEAN_A]))
        wait_until(a, "phase A labels", lambda o: labels_ever(o) == CLEAN_A)
        first = wait_until(a, "the first refit", lambda o: len(o["refits"]) == 1)["refits"][0]
        assert first["decision"] == "accepted", first
        assert first["trained"] + first["held_out"] == CLEAN_A
        asyncio.run(replay(urls, prompts[CLEAN_A : CLEAN_A + FLIPPED_B]))
        wait_until(a, "phase B labels", lambda o: labels_ever(o) == CLEAN_A + FLIPPED_B)
        asyncio.run(replay(urls, prompts[CLEAN_A + FLIPPED_B : REPLAYED]))
        second = wait_until(a, "the second refit", lambda o: len(o["refits"]) == 2)["refits"][0]
        both = [wait_until(u, "serving", lambda o: o["serving_version"] == 1) for u in urls]
        version, model = serving_model(root)
        shipped = asyncio.run(shipped_tiers(b, [e.text for e in held_out]))
        replay_s = time.monotonic() - started
    assert second["decision"] == "rolled_back", second  # trained on the flipped labels
    assert second["metrics"]["loss_refit"] > second["metrics"]["loss_serving"]
    assert version == 1 and model is not None  # the first refit still serves, on both
    assert all(o["replica"]["serving_version"] == 1 for o in both)
    assert sum(o["replica"]["shadow_labelled"] for o in both) == REPLAYED

    correct = np.array([e.tiers for e in held_out], dtype=np.float64)
    cost = np.array([e.costs for e in held_out], dtype=np.float64)
    expected_cost = np.array([e.costs for e in examples[:REPLAYED]]).mean(axis=0)
    embedder = build_embedder(ClassifierConfig())
    texts = [e.text for e in held_out]
    vectors = cached_embed(embedder, texts, embedding_cache_path(embedder.name))
    features = np.stack([text_features(e.messages, e.text) for e in held_out])
    base = ComplexityQuality(ComplexityModel.load(), TIERS)
    refit = RefittedQuality(base, Correction.from_bytes(model))
    ship_cost, ship_accuracy = equal_cost.outcome(np.asarray(shipped, np.intp), correct, cost)

    def at_shipped_cost(quality: Any) -> float:
        points = equal_cost.policy_points(
            quality.predict(vectors, features), expected_cost, correct, cost
        )
        return equal_cost.envelope_at(points, ship_cost)

    refitted, unrefitted = at_shipped_cost(refit), at_shipped_cost(base)
    hull = equal_cost.envelope_at(equal_cost.fixed_points(correct, cost), ship_cost)
    print(
        f"\nreplay {REPLAYED} rows over 2 replicas in {replay_s:.0f}s; {len(held_out)} rows "
        f"not replayed, at the shipped policy's cost ({ship_cost:.1%} of always-large):\n"
        f"  shipped target_share 70/20/10  accuracy {ship_accuracy:.3f}\n"
        f"  refit (400 labels), cost rule  accuracy {refitted:.3f} "
        f"({refitted - ship_accuracy:+.3f})\n"
        f"  base model, same cost rule     accuracy {unrefitted:.3f}\n"
        f"  fixed-tier hull                accuracy {hull:.3f}\n"
        f"  first refit: {first['reason']}; second: {second['reason']}"
    )
    assert refitted >= ship_accuracy + MARGIN
    assert refitted >= unrefitted - 0.02  # the refit does not give up what the base had
