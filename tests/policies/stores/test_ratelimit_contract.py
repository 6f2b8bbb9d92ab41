"""One contract for both rate limiters (short windows, so the tests stay quick)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from policies.schema import RateLimitSpec
from policies.stores.ratelimit import MemoryRateLimiter, RateLimiter, RateScope, format_duration
from policies.stores.ratelimit_redis import RedisRateLimiter
from tests.redis_servers import REDIS7_URL, redis_store

WINDOW_S = 1.0


@pytest.fixture(params=["memory", "redis", "cluster"])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[RateLimiter]:
    if request.param == "memory":
        yield MemoryRateLimiter(window_s=WINDOW_S)
        return
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    async with redis_store(url, cluster=cluster) as store:
        yield RedisRateLimiter(store, window_s=WINDOW_S)


def tenant(rpm: int | None = None, tpm: int | None = None) -> RateScope:
    return RateScope("tenant:acme", RateLimitSpec(requests_per_minute=rpm, tokens_per_minute=tpm))


async def test_exactly_the_limit_per_window(limiter: RateLimiter) -> None:
    decisions = await asyncio.gather(
        *(limiter.acquire(f"r{i}", [tenant(rpm=5)], 1) for i in range(20))
    )
    allowed = [d for d in decisions if d.allowed]
    assert len(allowed) == 5
    refused = [d for d in decisions if not d.allowed]
    assert all(0 < d.retry_after_s <= WINDOW_S for d in refused)
    headers = refused[0].headers()
    assert headers["x-ratelimit-limit-requests"] == "5"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["Retry-After"] == "1"
    await asyncio.sleep(max(d.retry_after_s for d in refused) + 0.05)
    assert (await limiter.acquire("later", [tenant(rpm=5)], 1)).allowed


async def test_tokens_per_window(limiter: RateLimiter) -> None:
    assert (await limiter.acquire("a", [tenant(tpm=100)], 60)).allowed
    second = await limiter.acquire("b", [tenant(tpm=100)], 60)
    assert not second.allowed and second.tokens is not None
    assert second.headers()["x-ratelimit-limit-tokens"] == "100"
    small = await limiter.acquire("c", [tenant(tpm=100)], 40)
    assert small.allowed and small.tokens is not None and small.tokens.remaining == 0
    too_big = await limiter.acquire("d", [tenant(tpm=100)], 101)
    assert not too_big.allowed and too_big.retry_after_s == pytest.approx(WINDOW_S, abs=0.01)


async def test_real_usage_replaces_the_estimate(limiter: RateLimiter) -> None:
    scopes = [tenant(tpm=100)]
    assert (await limiter.acquire("a", scopes, 90)).allowed
    assert not (await limiter.acquire("b", scopes, 50)).allowed
    await limiter.correct("a", scopes, 90, 30)  # the request used 30 of its estimated 90
    after = await limiter.acquire("c", scopes, 50)
    assert after.allowed and after.tokens is not None and after.tokens.remaining == 20


async def test_a_refused_key_records_nothing_on_the_tenant(limiter: RateLimiter) -> None:
    key = RateScope("key:acme:k1", RateLimitSpec(requests_per_minute=1))
    both = [tenant(rpm=3), key]
    assert (await limiter.acquire("a", both, 1)).allowed
    refused = await limiter.acquire("b", both, 1)
    assert not refused.allowed and refused.refused_by == "key:acme:k1"
    # The tenant still has two of its three: the refusal took nothing from it.
    assert (await limiter.acquire("c", [tenant(rpm=3)], 1)).allowed
    assert (await limiter.acquire("d", [tenant(rpm=3)], 1)).allowed
    assert not (await limiter.acquire("e", [tenant(rpm=3)], 1)).allowed


def test_durations_read_like_openai() -> None:
    assert format_duration(0.25) == "250ms"
    assert format_duration(1.0) == "1s"
    assert format_duration(360.0) == "6m0s"
