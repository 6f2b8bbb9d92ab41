"""YAML backend name → engine factory. Factories import their engine library lazily."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from backends.base import Engine

EngineFactory = Callable[..., Engine]

# name → "module:factory"; the module is imported only when a config uses the backend.
BACKENDS: dict[str, str] = {
    "fake": "backends.fake:FakeEngine",
    "llamacpp": "backends.llamacpp:LlamaCppEngine",
    "litellm": "backends.litellm:LiteLLMEngine",
    "vllm": "backends.vllm:VllmEngine",
    "sglang": "backends.sglang:SglangEngine",
    "openai": "backends.openai_compat:OpenAICompatEngine",
}


class UnknownBackend(KeyError):
    pass


def factory(backend: str) -> EngineFactory:
    try:
        target = BACKENDS[backend]
    except KeyError:
        raise UnknownBackend(f"unknown backend {backend!r}; known: {sorted(BACKENDS)}") from None
    module_name, _, attr = target.partition(":")
    built: EngineFactory = getattr(importlib.import_module(module_name), attr)
    return built


def build_engine(backend: str, name: str, model: str, options: Mapping[str, Any]) -> Engine:
    return factory(backend)(name=name, model=model, **options)
