"""The litellm backend against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import openai
import pytest

from backends.base import GenerationRequest, SamplingParams
from backends.errors import UpstreamRejected
from backends.litellm import LiteLLMEngine
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway
from tiergate_testing.upstream import running_upstream

pytestmark = pytest.mark.slow


def request(model: str = "remote-model", max_tokens: int | None = None) -> GenerationRequest:
    return GenerationRequest(
        request_id="r1",
        model=model,
        sampling=SamplingParams(max_tokens=max_tokens, seed=1),
        messages=({"role": "user", "content": "hi"},),
    )


async def test_engine_streams_deltas_and_usage() -> None:
    with running_upstream() as upstream:
        engine = LiteLLMEngine(
            name="up-0",
            model="remote-model",
            litellm_model="openai/remote-model",
            api_base=upstream.base_url,
            api_key="x",
        )
        await engine.start()
        chunks = [c async for c in engine.stream(request(max_tokens=4))]
    texts = [c.text for c in chunks if c.text]
    assert "".join(texts) == "Hello from the upstream"
    final = chunks[-1]
    assert final.finish_reason == "stop"
    assert final.usage is not None
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (7, 4)
    assert final.usage.cached_tokens == 3
    sent = upstream.stats.bodies[0]
    assert sent["stream"] is True and sent["max_tokens"] == 4 and sent["seed"] == 1
    assert engine.counters.finished == 1 and engine.counters.active == 0


async def test_engine_maps_a_rejection() -> None:
    with running_upstream() as upstream:
        engine = LiteLLMEngine(
            name="up-0",
            model="reject-me",
            litellm_model="openai/reject-me",
            api_base=upstream.base_url,
            api_key="x",
        )
        await engine.start()
        with pytest.raises(UpstreamRejected):
            [c async for c in engine.stream(request(model="reject-me"))]
    assert engine.counters.aborted == 1


def test_gateway_streams_through_litellm() -> None:
    with running_upstream() as upstream:
        base = upstream.base_url
        config = fake_config()
        config["engines"]["fake-medium"] = {
            "backend": "litellm",
            "model": "remote-model",
            "options": {"litellm_model": "openai/remote-model", "api_base": base, "api_key": "x"},
        }
        config["prices"]["remote-model"] = {"input": 1.0, "output": 1.0}
        with running_gateway(config) as gw:
            client = openai.OpenAI(base_url=gw.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
            stream = client.chat.completions.create(
                model="medium",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            pieces, usage = [], None
            for event in stream:
                usage = event.usage or usage
                pieces.extend(c.delta.content or "" for c in event.choices)
    assert "".join(pieces) == "Hello from the upstream server."
    assert usage is not None and usage.completion_tokens == 6
    assert upstream.stats.streams_completed == 1
