"""The score sketch behind ``routing.target_share``: quantiles, thresholds that hold on
traffic they were not learned from, the share store's contract (memory, Redis, cluster),
and two trackers on one store routing by the same thresholds."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import numpy as np
import pytest

from policies.routing_spec import RoutingConfig
from policies.schema import GatewayConfig
from policies.stores.shares import MemoryShareStore, RedisShareStore, ShareStore
from routers.decision import tier_for_score
from routers.score_sketch import bin_of, quantile, thresholds_for
from routers.target_share import TargetShares
from tests.redis_servers import REDIS7_URL, redis_store
from tiergate_testing.configs import fake_config

TIERS = ("small", "medium", "large")
TARGET = {"small": 0.7, "medium": 0.2, "large": 0.1}


def scores(seed: int, n: int) -> list[float]:
    """Calibrated-looking scores: most near 0, a long tail towards 1."""
    rng = np.random.default_rng(seed)
    return [float(s) for s in rng.beta(0.6, 4.0, size=n)]


def sketch(values: list[float]) -> dict[int, int]:
    return dict(Counter(bin_of(v) for v in values))


def test_quantiles_match_numpy_within_a_bin() -> None:
    values = scores(1, 20_000)
    counts = sketch(values)
    for q in (0.05, 0.25, 0.5, 0.7, 0.9, 0.99):
        exact = float(np.quantile(values, q))
        assert quantile(counts, q) == pytest.approx(exact, rel=0.01, abs=1e-4)
    assert quantile(counts, 0.0) == 0.0 and quantile(counts, 1.0) == 1.0
    with pytest.raises(ValueError):
        quantile({}, 0.5)


def test_learned_thresholds_hold_on_held_out_traffic() -> None:
    low, high = thresholds_for(sketch(scores(2, 20_000)), TIERS, TARGET)
    routed = Counter(tier_for_score(s, TIERS, (low, high)) for s in scores(3, 20_000))
    for tier, share in TARGET.items():
        assert routed[tier] / 20_000 == pytest.approx(share, abs=0.01)
    # the shipped fixed thresholds are far from this target on the same traffic
    fixed = Counter(tier_for_score(s, TIERS, (0.3, 0.7)) for s in scores(3, 20_000))
    assert fixed["small"] / 20_000 > 0.8


def test_two_tiers_and_a_zero_share() -> None:
    counts = sketch(scores(4, 5000))
    low, high = thresholds_for(counts, ("cheap", "big"), {"cheap": 0.9, "big": 0.1})
    assert low == high == pytest.approx(quantile(counts, 0.9))
    low, high = thresholds_for(counts, TIERS, {"small": 0.8, "medium": 0.2, "large": 0.0})
    assert high == 1.0


@pytest.mark.parametrize(
    "shares, problem",
    [
        ({"small": 0.7, "medium": 0.3}, "exactly the tiers"),
        ({"small": 0.7, "medium": 0.2, "large": 0.2}, "add up to 1"),
        ({"small": 1.2, "medium": -0.1, "large": -0.1}, "lie in"),
    ],
)
def test_bad_target_shares_are_refused(shares: dict[str, float], problem: str) -> None:
    raw = fake_config()
    raw["routing"] = {"target_share": shares}
    with pytest.raises(ValueError, match=problem):
        GatewayConfig.model_validate(raw)


@pytest.fixture(params=["memory", "redis", "cluster"])
async def share_store(request: pytest.FixtureRequest) -> AsyncIterator[ShareStore]:
    if request.param == "memory":
        yield MemoryShareStore()
        return
    url = REDIS7_URL
    cluster = request.param == "cluster"
    if cluster:
        url = request.getfixturevalue("redis_cluster").url
    async with redis_store(url, cluster=cluster) as owner:
        yield RedisShareStore(owner)


async def test_share_store_sums_buckets_and_expires_them(share_store: ShareStore) -> None:
    now = await share_store.now()
    assert now > 1.7e9  # a wall clock (Redis TIME on Redis)
    await share_store.add("p", 10, {"b1": 2, "tsmall": 2}, ttl_s=60)
    await share_store.add("p", 10, {"b1": 1}, ttl_s=60)
    await share_store.add("p", 11, {"b7": 4, "tlarge": 4}, ttl_s=60)
    await share_store.add("other", 11, {"b7": 100}, ttl_s=60)
    await share_store.add("p", 12, {"b9": 5}, ttl_s=0.05)
    await asyncio.sleep(0.2)
    total = await share_store.read("p", [10, 11, 12, 13])
    assert total == {"b1": 3, "tsmall": 2, "b7": 4, "tlarge": 4}
    assert await share_store.read("p", [11]) == {"b7": 4, "tlarge": 4}


def routing(min_samples: int = 100) -> RoutingConfig:
    return RoutingConfig.model_validate(
        {"target_share": TARGET, "target": {"min_samples": min_samples, "sync_s": 0.01}}
    )


async def test_two_replicas_on_one_store_route_by_the_same_thresholds() -> None:
    store = MemoryShareStore()
    first, second = TargetShares(store), TargetShares(store)
    config, background = routing(), set[asyncio.Task[None]]()
    bounds, why = first.thresholds(config, TIERS, background)
    assert bounds == (0.3, 0.7) and "meanwhile" in why  # nothing seen yet
    for score in scores(5, 3000):  # all the traffic goes to the first replica
        first.route(config, TIERS, score, background)
    await first.sync(config, TIERS)
    await second.sync(config, TIERS)  # the second one only reads the pooled sketch
    assert second.samples == 3000
    learned, why = second.thresholds(config, TIERS, background)
    assert why == "target_share quantiles"
    assert learned == first.thresholds(config, TIERS, background)[0]
    held_out = Counter(tier_for_score(s, TIERS, learned) for s in scores(6, 3000))
    for tier, share in TARGET.items():
        assert held_out[tier] / 3000 == pytest.approx(share, abs=0.03)
    report = second.report(config, TIERS)
    assert report["source"] == "target_share" and report["samples"] == 3000
    assert [row["target"] for row in report["tiers"]] == [0.7, 0.2, 0.1]
    assert sum(row["requests"] for row in report["tiers"]) == 3000
    await asyncio.gather(*background)
