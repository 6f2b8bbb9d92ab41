"""The cache across processes and through outages: two real gateway processes share it;
Redis stopped or stalled mid-run never fails a request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.redis_servers import (
    REDIS7_URL,
    RedisProcess,
    cache_prefix,
    delete_prefix,
    redis8_process,
)
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import GatewayProcess, running_gateway, subprocess_env

pytestmark = pytest.mark.slow

QUESTION = "What is the boiling point of water at sea level?"
PARAPHRASE = "At sea level, what's the boiling point of water?"


def post(base: str, content: str, key: str = TEST_KEY, **extra: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **extra.pop("headers", {})}
    body = {"model": "small", "temperature": 0, "messages": [{"role": "user", "content": content}]}
    return httpx.post(
        base + "/v1/chat/completions", json={**body, **extra}, headers=headers, timeout=30
    )


@pytest.fixture(params=["redis7", "redis8"])
def two_gateways(
    request: pytest.FixtureRequest, redis8: RedisProcess, tmp_path: Path
) -> Iterator[tuple[str, str]]:
    url = REDIS7_URL if request.param == "redis7" else redis8.url
    prefix = cache_prefix()
    config = fake_config()
    config["redis_url"] = url
    config["cache"] = {"semantic": True, "key_prefix": prefix}
    env = subprocess_env(
        TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_OTHER_KEY=OTHER_KEY, OMP_NUM_THREADS="1"
    )
    env.pop("TIERGATE_REDIS_URL", None)
    gateways = [GatewayProcess(config, tmp_path, name=name, env=env) for name in ("a", "b")]
    try:
        for gateway in gateways:
            gateway.spawn()
        for gateway in gateways:
            gateway.wait_ready(timeout_s=180)
        yield gateways[0].base_url, gateways[1].base_url
    finally:
        for gateway in gateways:
            gateway.stop(timeout_s=30)
        delete_prefix(url, prefix)


def test_two_processes_share_exact_and_semantic_entries(two_gateways: tuple[str, str]) -> None:
    a, b = two_gateways
    stored = post(a, QUESTION)
    assert stored.headers["x-tiergate-cache"] == "miss"
    exact = post(b, QUESTION)
    assert exact.headers["x-tiergate-cache"] == "exact"
    assert exact.json()["choices"] == stored.json()["choices"]
    # On Redis 7, B learns of A's entry through the stream: allow it a moment. no-store keeps
    # B's own misses out of the cache while it waits.
    deadline, status = time.monotonic() + 10, ""
    while time.monotonic() < deadline:
        semantic = post(b, PARAPHRASE, headers={"cache-control": "no-store"})
        status = semantic.headers["x-tiergate-cache"]
        if status == "semantic":
            break
        time.sleep(0.1)
    assert status == "semantic"
    assert semantic.json()["choices"][0]["message"] == stored.json()["choices"][0]["message"]
    # The other tenant sees none of it, from either process (no-store: it adds nothing).
    keep_out = {"cache-control": "no-store"}
    for base in (a, b):
        for content in (QUESTION, PARAPHRASE):
            other = post(base, content, key=OTHER_KEY, headers=keep_out)
            assert other.headers["x-tiergate-cache"] == "miss"


def _stall(port: int, seconds: float) -> None:
    """Redis answers no client for ``seconds`` from the moment this returns (a pause, not
    ``DEBUG SLEEP`` from a thread, which could start after the request it should stall)."""
    with redis.Redis(port=port) as client:
        client.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "ALL")


def test_redis_stopped_or_stalled_mid_run_never_fails_a_request() -> None:
    with redis8_process() as server:
        config = fake_config()
        config["redis_url"] = server.url
        # The cache's timeout is a liveness bound here, well above what a put takes on a
        # loaded host (0.1 s was not: a put that took longer left the second ask a miss);
        # the stall is what must outlast it.
        config["cache"] = {"semantic": True, "timeout_s": 1.0, "retry_after_s": 0.3}
        for tenant in config["tenants"].values():
            # The budget ledger shares this Redis; let it fail open so only the cache is tested.
            tenant.update(budget_fail_open=True, rate_limit_fail_open=True)
        with running_gateway(config) as gw:
            base = gw.base_url
            assert post(base, QUESTION).headers["x-tiergate-cache"] == "miss"
            assert post(base, QUESTION).headers["x-tiergate-cache"] == "exact"

            # Stalled: the server answers nobody for longer than the cache timeout.
            cache = gw.state.parts.cache
            assert cache is not None
            before = cache.counters.unavailable
            _stall(server.port, 6.0)
            slow = post(base, "A question while Redis stalls.")
            assert slow.status_code == 200 and slow.headers["x-tiergate-cache"] == "bypass"
            assert cache.counters.unavailable > before  # the cache call timed out
            with redis.Redis(port=server.port) as client:
                client.ping()  # answered once the pause is over

            # Stopped.
            server.stop()
            before = cache.counters.unavailable
            time.sleep(0.4)
            for content in (QUESTION, PARAPHRASE, "A brand new question."):
                response = post(base, content)
                assert response.status_code == 200
                assert response.json()["choices"][0]["message"]["content"]
                assert response.headers["x-tiergate-cache"] == "bypass"
            streamed = post(base, "Streamed while Redis is down.", stream=True)
            assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
            assert cache.counters.unavailable > before

            # Back again (empty, no persistence): the cache resumes on its own.
            server.start()
            # Until the first failure's back-off (retry_after_s) has passed and a miss has
            # stored the answer again, an ask may still bypass: ask until one is a hit.
            statuses: list[str] = []
            deadline = time.monotonic() + 30  # liveness
            while "exact" not in statuses and time.monotonic() < deadline:
                response = post(base, QUESTION)
                assert response.status_code == 200
                statuses.append(response.headers["x-tiergate-cache"])
                time.sleep(0.1)
            assert statuses[-1] == "exact", statuses
