"""YAML backend name → engine factory and its options model. Factories import their engine
library lazily; the options models (backends.options) import nothing heavy, so the config
can be checked without any engine library."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backends.base import Engine
from backends.options import (
    EngineOptions,
    FakeOptions,
    LiteLLMOptions,
    LlamaCppOptions,
    OpenAIOptions,
    SglangOptions,
    VllmOptions,
)

EngineFactory = Callable[..., Engine]


@dataclass(frozen=True, slots=True)
class Backend:
    target: str  # "module:factory"; the module is imported only when a config uses it
    options: type[EngineOptions]
    # Runs in this process or on this machine: a guardrail's ``local`` request may use it.
    in_process: bool = True
    # Whether its answers carry token log-probabilities (routing.escalation judges the
    # cheap answer by them). Forwarding backends: only if the server behind returns them,
    # which the engine spec declares (``logprobs: true``); SGLang's adapter asks for none.
    logprobs: bool = False


BACKENDS: dict[str, Backend] = {
    "fake": Backend("backends.fake:FakeEngine", FakeOptions, logprobs=True),
    "llamacpp": Backend("backends.llamacpp:LlamaCppEngine", LlamaCppOptions, logprobs=True),
    "litellm": Backend("backends.litellm:LiteLLMEngine", LiteLLMOptions, in_process=False),
    "vllm": Backend("backends.vllm:VllmEngine", VllmOptions, logprobs=True),
    "sglang": Backend("backends.sglang:SglangEngine", SglangOptions),
    "openai": Backend("backends.openai_compat:OpenAICompatEngine", OpenAIOptions, in_process=False),
}


class UnknownBackend(KeyError):
    pass


def backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r}; known: {sorted(BACKENDS)}") from None


def factory(name: str) -> EngineFactory:
    module_name, _, attr = backend(name).target.partition(":")
    built: EngineFactory = getattr(importlib.import_module(module_name), attr)
    return built


def build_engine(
    name: str,
    engine_name: str,
    model: str,
    options: Mapping[str, Any],
    default_max_tokens: int | None = None,
) -> Engine:
    """One engine of backend ``name``; ``options`` are checked against its model first."""
    spec = backend(name)
    kwargs = spec.options.model_validate(dict(options)).kwargs()
    if default_max_tokens is not None and spec.options.takes_default_max_tokens:
        kwargs["default_max_tokens"] = default_max_tokens
    return factory(name)(name=engine_name, model=model, **kwargs)
