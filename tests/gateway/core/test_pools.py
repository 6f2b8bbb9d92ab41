"""Pools behind the real HTTP server: 503 with Retry-After, death mid-stream, tier failover."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway

AUTH = {"authorization": f"Bearer {TEST_KEY}"}
BODY = {"model": "small", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def slow_pool_config(**pool: Any) -> dict[str, Any]:
    config = fake_config(tokens=40, token_delay_s=0.02)
    config["engines"]["fake-small"]["replicas"] = 2
    config["tiers"]["small"]["pool"] = pool
    return config


def client_for(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def stream_in_background(base_url: str, events: list[str], opened: threading.Event) -> None:
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", base_url + "/v1/chat/completions", json=BODY, headers=AUTH) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                opened.set()


def test_full_queue_is_openai_503_with_retry_after() -> None:
    config = slow_pool_config(max_waiting=0, retry_after_s=3)
    config["engines"]["fake-small"]["max_inflight"] = 1
    with running_gateway(config) as gw:
        holders = []
        for _ in range(2):  # one per replica: the tier is now full
            opened = threading.Event()
            thread = threading.Thread(
                target=stream_in_background, args=(gw.base_url, [], opened), daemon=True
            )
            thread.start()
            assert opened.wait(10)
            holders.append(thread)
        with pytest.raises(openai.APIStatusError) as caught, client_for(gw.base_url) as client:
            client.chat.completions.create(
                model="small", messages=[{"role": "user", "content": "x"}]
            )
        assert caught.value.status_code == 503
        assert caught.value.response.headers["retry-after"] == "3"
        assert caught.value.response.json()["error"]["code"] == "overloaded"
        for thread in holders:
            thread.join(10)
        # Nothing was half-started by the refused request.
        assert sum(r.engine.counters.started for r in gw.state.parts.replicas["fake-small"]) == 2
        assert gw.state.parts.pools["small"].counters.rejected == 1


def test_replica_killed_mid_stream_then_the_next_request_succeeds_on_another() -> None:
    with running_gateway(slow_pool_config()) as gw:
        events: list[str] = []
        opened = threading.Event()
        thread = threading.Thread(
            target=stream_in_background, args=(gw.base_url, events, opened), daemon=True
        )
        thread.start()
        assert opened.wait(10)
        group = gw.state.parts.replicas["fake-small"]
        victim = next(r for r in group if r.inflight == 1)

        async def kill() -> None:
            victim.rebuild_backoff_s = 30  # keep it down while we look
            victim.engine.dead = True  # type: ignore[attr-defined]

        gw.call(kill())
        thread.join(10)
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "upstream_error"
        survivor = next(r for r in group if r is not victim)
        before = survivor.engine.counters.finished
        with client_for(gw.base_url) as client:
            result = client.chat.completions.create(
                model="small", messages=[{"role": "user", "content": "next"}]
            )
        assert result.choices[0].message.content
        assert survivor.engine.counters.finished == before + 1


def test_tier_whose_replicas_die_fails_over_with_a_header() -> None:
    config = slow_pool_config(rebuild_dead=False)
    config["tiers"]["large"]["pool"] = {"rebuild_dead": False, "weights": {"prefix": 5}}
    with running_gateway(config) as gw, client_for(gw.base_url) as client:
        assert gw.state.parts.pools["large"].settings.prefix_weight == 5
        ok = client.chat.completions.with_raw_response.create(
            model="large", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
        assert ok.headers["x-tiergate-tier"] == "large"
        assert "x-tiergate-failover" not in ok.headers

        async def kill() -> None:
            for replica in gw.state.parts.replicas["fake-large"]:
                replica.engine.dead = True  # type: ignore[attr-defined]

        gw.call(kill())
        started = time.monotonic()
        raw = client.chat.completions.with_raw_response.create(
            model="large", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
        assert raw.headers["x-tiergate-tier"] == "medium"
        assert raw.headers["x-tiergate-failover"] == "large->medium"
        assert raw.parse().choices[0].message.content
        assert time.monotonic() - started < 5
