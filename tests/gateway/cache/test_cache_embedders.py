"""Two embedders on one shared cache (a rolling change from MiniLM to the static table):
through real gateways (uvicorn, the official client) on Redis 7 (stream index) and
Redis 8 (vector sets), a replica never compares the other's vectors, never errors on
their dimension, and still shares exact entries; ``auto`` routes with the static one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.redis_servers import REDIS7_URL, RedisProcess, cache_prefix, delete_prefix
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow  # builds the ONNX MiniLM and the static table

QUESTION = "What is the capital of France?"
PARAPHRASE = "Can you tell me what the capital of France is?"


def config(url: str, prefix: str, embedder: str) -> dict[str, Any]:
    built = fake_config()
    built["redis_url"] = url
    built["redis_prefix"] = prefix
    built["cache"] = {"semantic": True, "key_prefix": prefix}
    built["routing"] = {"classifier": {"embedder": embedder, "workers": 0}}
    built["tenants"]["acme"]["cache"] = {"semantic_verify": "guard"}  # recall: any paraphrase
    return built


def ask(gateway: RunningGateway, content: str, model: str = "small") -> dict[str, str]:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=model, temperature=0, messages=[{"role": "user", "content": content}]
    )
    return dict(raw.headers)


@pytest.fixture(params=["redis7", "redis8"])
def redis_url(request: pytest.FixtureRequest, redis8: RedisProcess) -> Iterator[tuple[str, str]]:
    url = REDIS7_URL if request.param == "redis7" else redis8.url
    prefix = cache_prefix()
    yield url, prefix
    delete_prefix(url, prefix)


def test_a_replica_never_compares_another_embedders_vectors(redis_url: tuple[str, str]) -> None:
    url, prefix = redis_url
    with running_gateway(config(url, prefix, "onnx")) as minilm:
        assert ask(minilm, QUESTION)["x-tiergate-cache"] == "miss"  # stored with 384-d
        assert ask(minilm, PARAPHRASE)["x-tiergate-cache"] == "semantic"
    with running_gateway(config(url, prefix, "static")) as static:
        # the same question: the exact entry is shared, whatever made the vector
        assert ask(static, QUESTION)["x-tiergate-cache"] == "exact"
        # a paraphrase: MiniLM's 384-d entry is in another space, never compared
        other = "Which city is the capital of France?"
        assert ask(static, other)["x-tiergate-cache"] == "miss"  # stored with 256-d, no error
        assert (
            ask(static, "Tell me which city is the capital of France?")["x-tiergate-cache"]
            == "semantic"
        )
        counters = static.state.parts.cache.counters  # type: ignore[union-attr]
        assert counters.unavailable == 0  # no store call failed (a mixed vector set would)
        headers = ask(static, "Prove that sqrt(2) is irrational.", model="auto")
        assert headers["x-tiergate-tier"] in {"small", "medium", "large"}
        assert 0.0 < float(headers["x-tiergate-complexity"]) < 1.0
