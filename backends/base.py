"""The engine seam: one request in, a stream of typed chunks out.

Every backend (llama.cpp, vLLM, SGLang, litellm, the test fake) implements
``Engine``. The gateway never imports an engine library; it holds ``Engine``
objects built by the registry from the YAML config.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

# Who is waiting for an answer: a client (``interactive``), or nobody right now (``batch``:
# a line of a batch job, which runs in the slots interactive requests leave free).
Priority = Literal["interactive", "batch"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float | None = None
    presence_penalty: float | None = None


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
    parallel_tool_calls: bool | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    # OpenAI fields only a remote OpenAI-compatible server can honour (``reasoning_effort``…).
    passthrough: Mapping[str, Any] = field(default_factory=dict)
    # The client wants one answer, not a stream: an engine that can fetch it whole may.
    whole: bool = False


# What an engine may declare in ``capabilities``: the OpenAI request fields beyond the ones
# every engine honours (model, messages/prompt, stream, n=1, stop, max_tokens, temperature,
# top_p, seed). ``passthrough`` stands for any field in ``GenerationRequest.passthrough``.
FEATURES = frozenset(
    {
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "logprobs",
        "top_logprobs",
        "frequency_penalty",
        "presence_penalty",
        "passthrough",
    }
)


# Passthrough fields an engine that cannot forward may leave out: the pool honours them
# (``prompt_cache_key`` names a conversation, which goes to the replica holding its prefix).
POOL_HONOURED = frozenset({"prompt_cache_key"})


def requested_features(request: GenerationRequest) -> dict[str, str]:
    """The features this request uses → the request field that names each (for the 400)."""
    used: dict[str, str] = {}
    if request.tools:
        used["tools"] = "tools"
    if request.tool_choice is not None:
        used["tool_choice"] = "tool_choice"
    if request.parallel_tool_calls is not None:
        used["parallel_tool_calls"] = "parallel_tool_calls"
    if request.response_format is not None and request.response_format.get("type") != "text":
        used["response_format"] = "response_format"
    if request.logprobs:
        used["logprobs"] = "logprobs"
    if request.top_logprobs is not None:
        used["top_logprobs"] = "top_logprobs"
    if request.sampling.frequency_penalty:
        used["frequency_penalty"] = "frequency_penalty"
    if request.sampling.presence_penalty:
        used["presence_penalty"] = "presence_penalty"
    forwarded = sorted(set(request.passthrough) - POOL_HONOURED)
    if forwarded:
        used["passthrough"] = forwarded[0]
    return used


def unsupported_field(request: GenerationRequest, capabilities: frozenset[str]) -> str | None:
    """The first request field an engine with these capabilities cannot honour, if any."""
    for feature, param in requested_features(request).items():
        if feature not in capabilities:
            return param
    return None


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
        "frequency_penalty": sampling.frequency_penalty,
        "presence_penalty": sampling.presence_penalty,
        "tools": list(request.tools) if request.tools else None,
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
        "response_format": request.response_format,
        "logprobs": request.logprobs or None,
        "top_logprobs": request.top_logprobs,
        **request.passthrough,
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
class TokenLogprob:
    """One generated token's log-probability, and the most likely alternatives at its place."""

    token: str
    logprob: float
    token_bytes: bytes
    top: tuple[tuple[str, float, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Chunk:
    """A text delta; the last chunk of a stream carries ``finish_reason`` and ``usage``.

    ``tool_call_deltas`` are OpenAI-shaped fragments (``index``, then ``id``/``type``/
    ``function.name`` once, then ``function.arguments`` pieces) of calls being generated;
    the last chunk's ``tool_calls`` holds every call whole. ``logprobs`` has one entry per
    token whose text this chunk releases."""

    text: str = ""
    finish_reason: str | None = None  # OpenAI's: stop, length, tool_calls, content_filter
    usage: Usage | None = None
    tool_calls: tuple[Mapping[str, Any], ...] | None = None
    tool_call_deltas: tuple[Mapping[str, Any], ...] | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None
    # The request's stop string that ended the answer (finish ``stop``), when the engine
    # knows which; None when it ended on its own or the engine does not say.
    stop_sequence: str | None = None


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
    capabilities: frozenset[str]  # a subset of ``FEATURES``: what this engine honours

    def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]: ...

    def load(self) -> EngineLoad: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class EmbeddingEngine(Protocol):
    """An engine that forwards ``/v1/embeddings`` (``openai``, ``litellm``): the body in
    OpenAI's shape, the answer in OpenAI's shape (``data``, ``usage``)."""

    async def embed(self, body: dict[str, Any]) -> dict[str, Any]: ...
