"""``routing.target_share`` on two real gateway processes sharing one Redis: traffic
replayed from the golden routing sample lands on each tier within 3 points of its target.

The first pass goes to replica A only; the replay is then spread over A and B, and B,
which saw nothing before, routes by the thresholds pooled in Redis from A's traffic."""

from __future__ import annotations

import asyncio
import csv
import gzip
import io
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from routers.decision import tier_for_score
from tests.redis_servers import REDIS7_URL, delete_prefix, unique_root
from tests.support import REPO
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import GatewayProcess, subprocess_env

pytestmark = pytest.mark.slow

ADMIN_KEY = "tg-admin-key-for-share-tests"
TARGET = {"small": 0.7, "medium": 0.2, "large": 0.1}
TIERS = tuple(TARGET)
SAMPLE = 500


def traffic_sample() -> list[str]:
    """A fixed random sample of the golden routing prompts (MMLU, GSM8K, MT-Bench)."""
    with gzip.open(REPO / "data" / "routing" / "golden.csv.gz", "rt", encoding="utf-8") as f:
        prompts = sorted({row["prompt"] for row in csv.DictReader(io.StringIO(f.read()))})
    return random.Random(15).sample(prompts, SAMPLE)


@contextmanager
def two_replicas(tmp: Path) -> Iterator[list[str]]:
    root = unique_root()
    raw: dict[str, Any] = fake_config()
    raw.update(redis_url=REDIS7_URL, redis_prefix=root, redis_timeout_s=5.0)
    raw["admin"] = {"key_from_env": "TIERGATE_ADMIN_KEY"}
    raw["tenants"]["acme"]["cache"] = {"enabled": False}  # every replayed request is classified
    raw["routing"] = {
        "classifier": {"max_wait_ms": 1},
        "target_share": TARGET,
        "target": {"min_samples": 200, "sync_s": 0.2},
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
        yield [replica.base_url for replica in replicas]
    finally:
        for replica in replicas:
            replica.stop()
        delete_prefix(REDIS7_URL, root)


async def replay(urls: list[str], prompts: list[str]) -> list[tuple[str, float]]:
    """Each prompt once, round-robin over ``urls``, 8 at a time: (tier, score) each."""
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    gate = asyncio.Semaphore(8)
    async with httpx.AsyncClient(headers=headers, timeout=120) as client:

        async def one(i: int, prompt: str) -> tuple[str, float]:
            body = {"model": "auto", "messages": [{"role": "user", "content": prompt}]}
            async with gate:
                answer = await client.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            return answer.headers["x-tiergate-tier"], float(answer.headers["x-tiergate-complexity"])

        return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))


def overview(url: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{url}/admin/api/overview", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    share: dict[str, Any] = answer.json()["tier_share"]
    return share


def explain(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "auto", "messages": [{"role": "user", "content": prompt}]}
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    answer = httpx.post(f"{url}/v1/route", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_target_share_holds_across_two_replicas(tmp_path: Path) -> None:
    prompts = traffic_sample()
    with two_replicas(tmp_path) as (a, b):
        asyncio.run(replay([a], prompts))  # replica A alone learns the traffic
        warmed = overview(a)  # syncs A's last counts into Redis
        assert warmed["source"] == "target_share" and warmed["samples"] == SAMPLE
        replayed = random.Random(16).sample(prompts, len(prompts))
        results = asyncio.run(replay([a, b], replayed))
        overview(a), overview(b)  # each syncs its last counts
        share_a, share_b = overview(a), overview(b)
        explained = [explain(b, p) for p in prompts[:5]]  # what-if: not traffic
        assert overview(b)["samples"] == 2 * SAMPLE
    routed = Counter(tier for tier, _ in results)
    actual = {t: routed[t] / len(results) for t in TIERS}
    fixed = Counter(tier_for_score(score, TIERS, (0.3, 0.7)) for _, score in results)
    print(
        f"\ntarget {TARGET}; replayed over 2 replicas: "
        + ", ".join(f"{t} {100 * actual[t]:.1f} %" for t in TIERS)
        + f"; thresholds {share_b['thresholds']}; fixed 0.3/0.7 would give "
        + ", ".join(f"{t} {100 * fixed[t] / len(results):.1f} %" for t in TIERS)
    )
    for tier, target in TARGET.items():
        assert actual[tier] == pytest.approx(target, abs=0.03), (tier, actual)
    # without the pooled thresholds this traffic misses the target (the check can fail)
    assert max(abs(fixed[t] / len(results) - TARGET[t]) for t in TIERS) > 0.03
    # B never saw the first pass, yet both replicas route by one pooled sketch
    assert share_a["samples"] == share_b["samples"] == 2 * SAMPLE
    assert share_a["thresholds"] == pytest.approx(share_b["thresholds"])
    for answer in explained:  # /v1/route shows the thresholds it routed by, and why
        assert answer["thresholds"] == pytest.approx(share_b["thresholds"])
        assert any("target_share quantiles" in step for step in answer["trail"])
    rows = {row["tier"]: row for row in share_b["tiers"]}
    assert {t: rows[t]["target"] for t in TIERS} == TARGET
    assert sum(row["requests"] for row in rows.values()) == 2 * SAMPLE
