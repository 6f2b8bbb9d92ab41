"""tiergate passing straight through to an OpenAI-compatible upstream, end to end:
official client → real uvicorn → ``openai`` backend → real upstream on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.upstream import Profile, Upstream

PROFILES = {"up-fast": Profile(chunks=6), "up-broken": Profile(fail_status=500)}


def passthrough_config(base_url: str, timing: bool = False) -> dict[str, Any]:
    engines = {
        model: {"backend": "openai", "model": model, "options": {"api_base": base_url}}
        for model in PROFILES
    }
    return {
        "server": {"timing_header": timing},
        "engines": engines,
        "tiers": {"small": {"engines": list(engines)}},
        "prices": {model: {"input": 1.0, "output": 2.0} for model in PROFILES},
        "tenants": {"acme": {"keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}]}},
    }


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with Upstream(PROFILES) as up:
        up.stats.keep_bodies = True
        yield up


@pytest.fixture
def gateway(upstream: Upstream) -> Iterator[RunningGateway]:
    with running_gateway(passthrough_config(upstream.base_url, timing=True)) as running:
        yield running


def client(gateway: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


MESSAGES = [{"role": "user", "content": "hello upstream"}]


async def test_non_stream_passes_text_and_usage_through(
    gateway: RunningGateway, upstream: Upstream
) -> None:
    async with client(gateway) as api:
        raw = await api.chat.completions.with_raw_response.create(
            model="up-fast",
            messages=MESSAGES,
            max_tokens=7,  # type: ignore[arg-type]
        )
    completion = raw.parse()
    assert completion.choices[0].message.content == "tok " * 6
    assert completion.usage is not None and completion.usage.completion_tokens == 6
    assert raw.headers["x-tiergate-model"] == "up-fast"
    sent = upstream.stats.bodies[-1]
    assert "stream" not in sent and sent["max_tokens"] == 7 and sent["messages"] == MESSAGES
    stages = [part.split(";")[0] for part in raw.headers["server-timing"].split(", ")]
    assert stages == [
        "auth",
        "parse",
        "route",
        "budget.reservation",
        "engine",
        "settlement",
        "budget.settle",
        "total",
    ]


async def test_stream_passes_chunks_and_usage_through(gateway: RunningGateway) -> None:
    async with client(gateway) as api:
        stream = await api.chat.completions.create(
            model="up-fast",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        texts, usage = [], None
        async for event in stream:
            usage = event.usage or usage
            texts += [choice.delta.content or "" for choice in event.choices]
    assert "".join(texts) == "tok " * 6
    assert usage is not None and usage.completion_tokens == 6


async def test_upstream_failure_is_an_openai_error(gateway: RunningGateway) -> None:
    async with client(gateway) as api:
        with pytest.raises(openai.APIStatusError) as caught:
            await api.chat.completions.create(model="up-broken", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    # The upstream's own text stays in the gateway's log (issue 13: no upstream text out).
    assert caught.value.message.endswith("the model failed while generating")
    assert "injected failure" not in caught.value.response.text


async def test_timing_header_is_off_by_default(upstream: Upstream) -> None:
    with running_gateway(passthrough_config(upstream.base_url)) as gateway:
        async with client(gateway) as api:
            raw = await api.chat.completions.with_raw_response.create(
                model="up-fast",
                messages=MESSAGES,  # type: ignore[arg-type]
            )
    assert "server-timing" not in raw.headers


@pytest.mark.parametrize("stream", [False, True])
async def test_client_leaving_aborts_the_upstream_request(stream: bool) -> None:
    profiles = {"up-slow": Profile(delay_s=0.05, chunks=100, gap_s=0.05)}
    if not stream:
        profiles = {"up-slow": Profile(delay_s=5.0)}
    async with Upstream(profiles) as up:
        config = passthrough_config(up.base_url)
        config["engines"] = {
            "up-slow": {
                "backend": "openai",
                "model": "up-slow",
                "options": {"api_base": up.base_url},
            }
        }
        config["tiers"] = {"small": {"engines": ["up-slow"]}}
        config["prices"] = {"up-slow": {"input": 1.0, "output": 1.0}}
        with running_gateway(config) as gateway:
            api = openai.AsyncOpenAI(
                base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0, timeout=0.5
            )
            async with api:
                if stream:
                    response = await api.chat.completions.create(
                        model="up-slow",
                        messages=MESSAGES,
                        stream=True,  # type: ignore[arg-type]
                    )
                    seen = 0
                    async for _ in response:
                        seen += 1
                        if seen == 3:
                            break
                    await response.close()
                else:
                    with pytest.raises(openai.APITimeoutError):
                        await api.chat.completions.create(model="up-slow", messages=MESSAGES)  # type: ignore[arg-type]
            for _ in range(200):
                if up.stats.streams_cut_by_client + up.stats.answers_cut_by_client:
                    break
                await asyncio.sleep(0.01)
        assert up.stats.streams_cut_by_client + up.stats.answers_cut_by_client == 1
        assert up.stats.streams_completed == 0
