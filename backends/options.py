"""Each backend's ``options:`` as a pydantic model, so ``check-config`` can name a wrong
option with its file and line without importing any engine library.

The fields mirror the engine's keyword arguments (``name``, ``model`` and
``default_max_tokens`` come from the engine spec itself). Unset fields are not passed, so
the engine's own defaults stay the single source of them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EngineOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Whether the engine takes the spec's ``default_max_tokens`` (an engine that runs the
    # model itself); a forwarding engine leaves the cap to the request.
    takes_default_max_tokens: ClassVar[bool] = False

    def kwargs(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class FakeToolRule(BaseModel):
    """A scripted tool call: when the last user message contains ``when``, call ``call``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    when: str = Field(min_length=1)
    call: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    broken: bool = False  # arguments cut in half: a call the model could not form


class FakeLogprobRule(BaseModel):
    """Token log-probabilities of an unsure model: when the prompt contains ``when``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    when: str = Field(min_length=1)
    logprob: float = Field(le=0)


class FakeOptions(EngineOptions):
    tokens: int = Field(16, ge=0)
    token_delay_s: float = Field(0.0, ge=0)
    first_token_delay_s: float = Field(0.0, ge=0)
    max_running: int = Field(64, ge=1)
    fail_after_tokens: int | None = Field(None, ge=0)
    dead: bool = False
    tools: bool = False  # declare tool calling (the script below makes the calls)
    tool_script: tuple[FakeToolRule, ...] = ()
    logprob: float = Field(-0.1, le=0)  # each token's, near it (a confident model)
    logprob_rules: tuple[FakeLogprobRule, ...] = ()


class LlamaCppOptions(EngineOptions):
    """One GGUF file (``model_path``), or ``part_count`` chunks named by the
    ``model_parts`` pattern (``{i}`` = 1…part_count), joined and checked against
    ``sha256`` before the model is opened (``backends.model_files``)."""

    takes_default_max_tokens: ClassVar[bool] = True

    model_path: str | None = None
    model_parts: str | None = None
    part_count: int | None = Field(None, ge=1)
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    n_ctx: int = Field(2048, ge=16)
    n_threads: int | None = Field(None, ge=1)
    n_batch: int = Field(256, ge=1)
    max_waiting: int = Field(64, ge=0)

    @model_validator(mode="after")
    def _one_model(self) -> LlamaCppOptions:
        if (self.model_path is None) == (self.model_parts is None):
            raise ValueError("give model_path or model_parts (with part_count and sha256)")
        if self.model_parts is not None:
            if self.part_count is None or self.sha256 is None:
                raise ValueError("model_parts needs part_count and sha256")
            if "{i" not in self.model_parts:
                raise ValueError("model_parts needs {i} (the part number, 1…part_count)")
        elif self.part_count is not None:
            raise ValueError("part_count goes with model_parts, not model_path")
        return self


class LiteLLMOptions(EngineOptions):
    litellm_model: str | None = None
    api_base: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(600.0, gt=0)
    max_retries: int = Field(0, ge=0)
    extra: dict[str, Any] | None = None


class OpenAIOptions(EngineOptions):
    # Required unless the engine has ``discover`` (checked on the engine spec).
    api_base: str | None = None
    upstream_model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(600.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    max_connections: int = Field(512, ge=1)
    extra_body: dict[str, Any] | None = None
    probe_load: bool = False
    probe_timeout_s: float = Field(1.0, gt=0)


class VllmOptions(EngineOptions):
    """The common ``AsyncEngineArgs`` fields by name; any other under ``engine_args``."""

    takes_default_max_tokens: ClassVar[bool] = True

    model_path: str | None = None
    device_ids: tuple[int, ...] | None = None
    env: dict[str, str] | None = None
    engine_args: dict[str, Any] | None = None
    tensor_parallel_size: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(None, ge=1)
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    speculative_config: dict[str, Any] | None = None
    max_num_queued_reqs: int | None = Field(None, ge=0)
    dtype: str | None = None
    seed: int | None = None
    block_size: int | None = Field(None, ge=1)
    enforce_eager: bool | None = None
    tokenizer: str | None = None
    tool_parser: str | None = None


class SglangOptions(EngineOptions):
    takes_default_max_tokens: ClassVar[bool] = True

    model_path: str | None = None
    device_ids: tuple[int, ...] | None = None
    server_args: dict[str, Any] | None = None
    engine_factory: str = "sglang:Engine"
    env: dict[str, str] | None = None
    start_timeout_s: float = Field(900.0, gt=0)
    stop_timeout_s: float = Field(30.0, gt=0)
    load_interval_s: float = Field(0.5, gt=0)
    # SGLang's FunctionCallParser name for the model's call format (hermes, qwen25,
    # llama3, mistral…); an unknown one fails at engine start. Without it, tools are a 400.
    tool_call_parser: str | None = None
    function_call_module: str = "sglang.srt.function_call.function_call_parser"
