"""Any provider or OpenAI-compatible server through ``litellm.acompletion``.

litellm is imported on first use (it takes seconds, and it would fetch a price map
from the network unless told to use its bundled copy, which we always do).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from backends.base import (
    FEATURES,
    Chunk,
    EngineCounters,
    EngineLoad,
    GenerationRequest,
    Usage,
    openai_options,
)
from backends.errors import (
    EngineError,
    EngineOverloaded,
    EngineUnavailable,
    UpstreamFailed,
    UpstreamRejected,
    UpstreamTimeout,
)
from backends.sse_parse import logprobs_of


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    litellm.drop_params = False  # an option the provider lacks is its 400, never dropped
    return litellm


def provider_errors() -> tuple[type[Exception], ...]:
    """litellm raises subclasses of the openai SDK's base error (and a few of its own)."""
    import litellm
    import openai

    return (openai.OpenAIError, litellm.exceptions.OpenAIError)


def map_error(litellm: Any, exc: Exception) -> EngineError:
    """litellm's exception tree → ours, in one place."""
    if isinstance(exc, litellm.Timeout):
        return UpstreamTimeout(str(exc))
    if isinstance(exc, litellm.RateLimitError):
        return EngineOverloaded(str(exc))
    if isinstance(exc, litellm.ServiceUnavailableError | litellm.APIConnectionError):
        return EngineUnavailable(str(exc))
    if isinstance(exc, litellm.BadRequestError):
        return UpstreamRejected(str(exc), status=400)
    if isinstance(exc, litellm.AuthenticationError):
        return UpstreamFailed(f"the provider refused our credentials: {exc}")
    return UpstreamFailed(str(exc))


class LiteLLMEngine:
    def __init__(
        self,
        *,
        name: str,
        model: str,
        litellm_model: str | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        self.capabilities = FEATURES  # the server it forwards to answers for the rest
        self.litellm_model = litellm_model or model
        self.api_base = api_base
        self.api_key = api_key or (os.environ.get(api_key_env) if api_key_env else None)
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.extra = extra or {}
        self._litellm: Any = None
        self._errors: tuple[type[Exception], ...] = ()

    async def start(self) -> None:
        self._litellm = _import_litellm()
        self._errors = provider_errors()

    async def aclose(self) -> None:
        return None

    def load(self) -> EngineLoad:
        return EngineLoad(running=self.counters.active, healthy=self._litellm is not None)

    def _params(self, request: GenerationRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.litellm_model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": self.timeout_s,
            "num_retries": self.max_retries,
            **self.extra,
        }
        endpoint = {"api_base": self.api_base, "api_key": self.api_key}
        params.update({k: v for k, v in endpoint.items() if v is not None})
        options = openai_options(request)
        if "metadata" in options:  # litellm keeps ``metadata`` for its own callbacks
            params["extra_body"] = {
                **params.get("extra_body", {}),
                "metadata": options.pop("metadata"),
            }
        params.update(options)
        if request.prompt is not None:
            params["messages"] = [{"role": "user", "content": request.prompt}]
            params["text_completion"] = True
        else:
            params["messages"] = [dict(m) for m in request.messages or ()]
        return params

    async def embed(self, body: dict[str, Any]) -> dict[str, Any]:
        """``litellm.aembedding`` with OpenAI's fields; the answer in OpenAI's shape."""
        litellm = self._litellm
        if litellm is None:
            raise EngineUnavailable(f"{self.name} is not started")
        params: dict[str, Any] = {
            "timeout": self.timeout_s,
            "num_retries": self.max_retries,
            **self.extra,
            **body,
            "model": self.litellm_model,
        }
        endpoint = {"api_base": self.api_base, "api_key": self.api_key}
        params.update({k: v for k, v in endpoint.items() if v is not None})
        try:
            response = await litellm.aembedding(**params)
        except self._errors as exc:
            raise map_error(litellm, exc) from exc
        answer: dict[str, Any] = response.model_dump(warnings=False)
        return answer

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        litellm = self._litellm
        if litellm is None:
            raise EngineUnavailable(f"{self.name} is not started")
        self.counters.started += 1
        finished = False
        try:
            try:
                response = await litellm.acompletion(**self._params(request))
            except self._errors as exc:
                raise map_error(litellm, exc) from exc
            finish = "stop"
            usage: Usage | None = None
            tool_calls: dict[int, dict[str, Any]] = {}
            try:
                async for part in response:
                    if getattr(part, "usage", None):
                        usage = _usage(part.usage)
                    for choice in part.choices or ():
                        delta = choice.delta
                        text = getattr(delta, "content", None) or ""
                        for call in getattr(delta, "tool_calls", None) or ():
                            _merge_tool_call(tool_calls, call)
                        if choice.finish_reason:
                            finish = choice.finish_reason
                        logprobs = logprobs_of(getattr(choice, "logprobs", None))
                        if text or logprobs:
                            self.counters.generated_tokens += 1
                            yield Chunk(text=text, logprobs=logprobs)
            except self._errors as exc:
                raise map_error(litellm, exc) from exc
            # No usage from the server: None, and the gateway charges an upper count (never
            # below what the reservation assumed) rather than a guess that undercounts CJK.
            calls = tuple(tool_calls[i] for i in sorted(tool_calls)) or None
            finished = True
            yield Chunk(finish_reason=finish, usage=usage, tool_calls=calls)
        finally:
            if finished:
                self.counters.finished += 1
            else:
                self.counters.aborted += 1


def _usage(raw: Any) -> Usage:
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(
        prompt_tokens=int(raw.prompt_tokens or 0),
        completion_tokens=int(raw.completion_tokens or 0),
        cached_tokens=int(cached),
    )


def _merge_tool_call(calls: dict[int, dict[str, Any]], delta: Any) -> None:
    """Tool calls stream in fragments keyed by index; join them into whole calls."""
    index = getattr(delta, "index", 0) or 0
    call = calls.setdefault(
        index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if getattr(delta, "id", None):
        call["id"] = delta.id
    function = getattr(delta, "function", None)
    if function is not None:
        call["function"]["name"] += getattr(function, "name", None) or ""
        call["function"]["arguments"] += getattr(function, "arguments", None) or ""
