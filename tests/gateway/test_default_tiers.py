"""The embedded default (config/gateway.yaml) under a real ``tiergate serve``: three different
models, each tier answering with its own. The rest of the suite runs on the 135M model alone
(``tiergate_testing.configs.smollm2_config``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import openai
import pytest

from tests.support import PYTHON, REPO
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import subprocess_env
from tiergate_testing.net import free_port, wait_http

MODELS = {
    "small": "smollm2-135m-instruct",
    "medium": "qwen2.5-coder-0.5b-instruct",
    "large": "qwen2.5-coder-1.5b-instruct",
}


@pytest.fixture(scope="module")
def served() -> Iterator[openai.OpenAI]:
    port = free_port()
    env = subprocess_env(TIERGATE_DEMO_KEY=TEST_KEY, TIERGATE_LOG_LEVEL="warning")
    command = [PYTHON, "-m", "gateway", "serve", "--config", "config/gateway.yaml"]
    proc = subprocess.Popen([*command, "--port", str(port)], cwd=REPO, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        # A first start joins and hashes 1.6 GB of model chunks (seconds, once per cache).
        wait_http(url + "/readyz", timeout_s=300)
        yield openai.OpenAI(base_url=url + "/v1", api_key=TEST_KEY, max_retries=0, timeout=300)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_models_lists_three_different_models(served: openai.OpenAI) -> None:
    listed = {m.id for m in served.models.list().data}
    assert set(MODELS.values()) <= listed


@pytest.mark.slow
@pytest.mark.parametrize("tier", list(MODELS))
def test_each_tier_answers_with_its_own_model(served: openai.OpenAI, tier: str) -> None:
    raw = served.chat.completions.with_raw_response.create(
        model=tier,
        messages=[{"role": "user", "content": "What is the capital of France? One word."}],
        max_tokens=8,
        temperature=0,
        logprobs=True,
    )
    reply = raw.parse()
    assert raw.headers["x-tiergate-tier"] == tier
    assert reply.model == MODELS[tier] == raw.headers["x-tiergate-model"]
    assert "paris" in (reply.choices[0].message.content or "").lower()
    assert reply.usage is not None and 0 < reply.usage.completion_tokens <= 8
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content  # the engine's own token probabilities
    assert all(entry.logprob <= 0 for entry in logprobs.content)
