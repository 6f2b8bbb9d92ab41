"""The engine seam: one request in, a stream of typed chunks out.

Every backend (llama.cpp, vLLM, SGLang, litellm, the test fake) implements
``Engine``. The gateway never imports an engine library; it holds ``Engine``
objects built by the registry from the YAML config.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What an engine needs to generate; exactly one of ``messages`` or ``prompt`` is set."""

    request_id: str
    model: str
    sampling: SamplingParams
    messages: tuple[Mapping[str, Any], ...] | None = None
    prompt: str | None = None
    tools: tuple[Mapping[str, Any], ...] | None = None
    tool_choice: Any = None
    response_format: Mapping[str, Any] | None = None
    # The client wants one answer, not a stream: an engine that can fetch it whole may.
    whole: bool = False


def openai_options(request: GenerationRequest) -> dict[str, Any]:
    """The request's optional fields in OpenAI's shape (unset ones left out), for the
    backends that speak that protocol."""
    sampling = request.sampling
    options = {
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "seed": sampling.seed,
        "stop": list(sampling.stop) or None,
        "tools": list(request.tools) if request.tools else None,
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
    }
    return {k: v for k, v in options.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Chunk:
    """A text delta; the last chunk of a stream carries ``finish_reason`` and ``usage``."""

    text: str = ""
    finish_reason: str | None = None  # OpenAI's: stop, length, tool_calls, content_filter
    usage: Usage | None = None
    tool_calls: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class EngineLoad:
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    healthy: bool = True


@dataclass(slots=True)
class EngineCounters:
    """Counted by the engine itself, so tests assert on what the engine did, not on timing."""

    started: int = 0
    finished: int = 0
    aborted: int = 0
    generated_tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def active(self) -> int:
        return self.started - self.finished - self.aborted


@runtime_checkable
class Engine(Protocol):
    """One model replica. Cancelling the iterator returned by ``stream`` aborts the request."""

    name: str
    model: str
    counters: EngineCounters

    def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]: ...

    def load(self) -> EngineLoad: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...
