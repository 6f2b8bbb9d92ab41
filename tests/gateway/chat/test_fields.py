"""Every OpenAI chat request field, per backend: honoured (200; a remote backend forwards
it to its server) or a 400 naming it — never silently ignored, never a 500.

One real gateway serves a tier per backend: the protocol fake, llama.cpp (SmolLM2),
SGLang (a real worker process around the fake engine and fake FunctionCallParser, with a
``tool_call_parser``: SGLang itself needs CUDA), ``openai`` and ``litellm`` (both
forwarding to a real OpenAI-compatible server on loopback that records what it received).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from backends.base import FEATURES
from backends.llamacpp import CAPABILITIES as LLAMACPP
from backends.sglang_chat import BASE_CAPABILITIES, TOOL_CAPABILITIES
from gateway.wire.fields import CHAT_FIELDS
from tests.backends.conftest import sglang_bridge_options
from tiergate_testing.configs import SMOLLM2, TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.upstream import UpstreamStats, running_upstream

pytestmark = pytest.mark.slow

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}},
    },
}
# A value for each field that asks for something (OpenAI's defaults are accepted anywhere).
SAMPLES: dict[str, dict[str, Any]] = {
    "model": {},
    "messages": {},
    "stream": {"stream": False},
    "stream_options": {"stream": True, "stream_options": {"include_usage": True}},
    "n": {"n": 1},
    "stop": {"stop": ["\n\n"]},
    "max_tokens": {"max_tokens": 3},
    "max_completion_tokens": {"max_completion_tokens": 3},
    "temperature": {"temperature": 0.5},
    "top_p": {"top_p": 0.9},
    "seed": {"seed": 7},
    "user": {"user": "end-user-1"},
    "tools": {"tools": [TOOL]},
    "tool_choice": {"tools": [TOOL], "tool_choice": "none"},
    "parallel_tool_calls": {"parallel_tool_calls": False},
    "response_format": {"response_format": {"type": "json_object"}},
    "logprobs": {"logprobs": True},
    "top_logprobs": {"logprobs": True, "top_logprobs": 2},
    "frequency_penalty": {"frequency_penalty": 0.5},
    "presence_penalty": {"presence_penalty": 0.5},
    "logit_bias": {"logit_bias": {"50256": -100}},
    "audio": {"audio": {"voice": "alloy", "format": "wav"}},
    "modalities": {"modalities": ["text", "audio"]},
    "prediction": {"prediction": {"type": "content", "content": "x"}},
    "reasoning_effort": {"reasoning_effort": "low"},
    "verbosity": {"verbosity": "low"},
    "service_tier": {"service_tier": "flex"},
    "store": {"store": True},
    "metadata": {"metadata": {"k": "v"}},
    "web_search_options": {"web_search_options": {"search_context_size": "low"}},
    "prompt_cache_key": {"prompt_cache_key": "k1"},
    "safety_identifier": {"safety_identifier": "s1"},
    "functions": {"functions": [TOOL["function"]]},
    "function_call": {"function_call": "auto"},
}
BACKENDS = {
    "fake": frozenset({"logprobs", "top_logprobs"}),
    "llamacpp": LLAMACPP,
    "sglang": BASE_CAPABILITIES | TOOL_CAPABILITIES,
    "openai": FEATURES,
    "litellm": FEATURES,
}
REMOTE = {"openai", "litellm"}
# Fields sent along with the one they need, which the 400 names first.
NAMED_FIRST = {"top_logprobs": "logprobs", "tool_choice": "tools"}
TIERS = {
    "fake": "small",
    "llamacpp": "llamacpp",
    "sglang": "sglang",
    "openai": "openai",
    "litellm": "litellm",
}


def test_every_field_has_a_sample() -> None:
    assert set(SAMPLES) == set(CHAT_FIELDS)


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[RunningGateway, UpstreamStats]]:
    with running_upstream() as upstream:
        base_url = upstream.base_url
        engines = {
            "fake": {"backend": "fake", "model": "fake-m", "options": {"tokens": 4}},
            "llamacpp": {
                "backend": "llamacpp",
                "model": "smollm2",
                "options": {"model_path": SMOLLM2, "n_ctx": 1024, "n_threads": 1},
            },
            "sglang": {
                "backend": "sglang",
                "model": "fake-sglang",
                "options": sglang_bridge_options(),
            },
            "openai": {"backend": "openai", "model": "up-m", "options": {"api_base": base_url}},
            "litellm": {
                "backend": "litellm",
                "model": "lite-m",
                "options": {
                    "litellm_model": "openai/lite-m",
                    "api_base": base_url,
                    "api_key": "sk-test",
                },
            },
        }
        config = {
            "engines": engines,
            # the tenant's default tier is "small": the fake's
            "tiers": {TIERS[name]: {"engines": [name]} for name in engines},
            "prices": {spec["model"]: {"input": 1.0, "output": 1.0} for spec in engines.values()},
            "tenants": {"acme": {"keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}]}},
        }
        with running_gateway(config) as gateway:
            yield gateway, upstream.stats


def _expected(backend: str, field: str) -> bool:
    kind = CHAT_FIELDS[field]
    if kind in ("core", "info", "session"):
        return True
    if kind == "passthrough":
        return backend in REMOTE
    return kind in BACKENDS[backend]


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("field", list(CHAT_FIELDS))
def test_field_is_honoured_or_named_in_a_400(
    setup: tuple[RunningGateway, UpstreamStats], backend: str, field: str
) -> None:
    gateway, stats = setup
    body = {
        "model": TIERS[backend],
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 4,
        **SAMPLES[field],
    }
    before = len(stats.bodies)
    response = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=120,
    )
    if not _expected(backend, field):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == NAMED_FIRST.get(field, field)
        assert error["code"] == "unsupported_parameter"
        assert len(stats.bodies) == before  # refused before dispatch
        return
    if backend == "litellm" and response.status_code == 400:
        # litellm knows what each provider takes: it refuses the rest, naming them.
        assert field in response.json()["error"]["message"]
        return
    assert response.status_code == 200, response.text
    if backend in REMOTE and CHAT_FIELDS[field] not in ("core", "info"):  # session: forwarded
        sent = stats.bodies[-1]
        assert field in sent, f"{field} did not reach the upstream: {sorted(sent)}"
    if field == "logprobs":  # and what came back reaches the client
        choice = response.json()["choices"][0]
        entries = choice["logprobs"]["content"]
        assert len(entries) == response.json()["usage"]["completion_tokens"] > 0
