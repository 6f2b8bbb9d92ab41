"""Engines and tiers in the config: which backend serves a model, how many replicas (or
which discovered nodes), and how a tier's pool picks among them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from backends.registry import BACKENDS
from policies.frozen import Frozen

# Backends that forward to a server: what its answers carry is the server's to say.
FORWARDING = frozenset({"openai", "litellm"})


class DiscoverySpec(Frozen):
    """Where an ``openai`` engine's nodes are found, re-read every ``refresh_s``: the A/AAAA
    records of a (headless Service) DNS name, a fixed list, or a file of base URLs."""

    dns: str | None = None
    port: int = Field(8000, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    path: str = Field("/v1", pattern=r"^(/[A-Za-z0-9._~-]+)*$")
    static: tuple[str, ...] | None = None
    file: str | None = None  # one base URL a line; '#' starts a comment
    refresh_s: float = Field(5.0, gt=0)
    # Each node's engine load (GET <base>/load) is read this often; a failed read takes it out.
    load_interval_s: float = Field(0.5, gt=0)
    probe_timeout_s: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> DiscoverySpec:
        if sum(source is not None for source in (self.dns, self.static, self.file)) != 1:
            raise ValueError("give exactly one of dns, static or file")
        return self


class EngineSpec(Frozen):
    """One engine definition; ``replicas`` copies of it are built (or, with ``discover``,
    one per node found at run time)."""

    backend: str
    model: str
    replicas: int = Field(1, ge=1, le=64)
    # Requests the pool sends one replica (with ``discover``: one node) at once.
    max_inflight: int = Field(256, ge=1)
    # What a request without ``max_tokens`` may generate on this engine's model (else
    # ``budgets.default_max_output_tokens``); engines that run the model also get it.
    default_max_tokens: int | None = Field(None, ge=1)
    # The backend's own options, checked against its model in backends.options.
    options: dict[str, Any] = Field(default_factory=dict)
    # Content the model can read; a request with other parts skips or gets a 400.
    modalities: tuple[Literal["text", "image", "audio", "file"], ...] = ("text",)
    discover: DiscoverySpec | None = None
    # Whether its answers carry token log-probabilities (routing.escalation needs them on
    # a tier that answers first); unset: the backend's declaration (backends/registry.py).
    logprobs: bool | None = None

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}; known: {', '.join(sorted(BACKENDS))}")
        return value

    @field_validator("options")
    @classmethod
    def _typed_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        moved = sorted(set(value) & {"max_inflight", "default_max_tokens"})
        if moved:
            raise ValueError(
                f"{', '.join(moved)} moved out of options: set it on the engine itself "
                "(beside backend and model)"
            )
        backend = info.data.get("backend")
        if backend is None:  # unknown backend: already reported
            return value
        return BACKENDS[backend].options.model_validate(value).kwargs()

    @model_validator(mode="after")
    def _discovered(self) -> EngineSpec:
        if self.logprobs is not None and self.backend not in FORWARDING:
            raise ValueError(
                f"logprobs is declared by backend {self.backend!r} itself; only a forwarding "
                f"backend ({', '.join(sorted(FORWARDING))}) takes it from the engine"
            )
        if self.discover is None:
            if self.backend == "openai" and "api_base" not in self.options:
                raise ValueError("backend 'openai' needs options.api_base (or discover)")
            return self
        if self.backend != "openai":
            raise ValueError("discover works with backend 'openai' (engine nodes) only")
        if self.replicas != 1:
            raise ValueError("with discover, the nodes found are the replicas: drop 'replicas'")
        if "api_base" in self.options:
            raise ValueError("with discover, the nodes found give api_base: drop it")
        return self


class PoolWeights(Frozen):
    """How a pool scores replicas; llm-d's defaults (queue 2, KV 2, prefix 3)."""

    queue: float = Field(2.0, ge=0)
    kv_cache: float = Field(2.0, ge=0)
    prefix: float = Field(3.0, ge=0)


class PoolSpec(Frozen):
    """One tier's replica choice and its bounded wait queue."""

    weights: PoolWeights = PoolWeights()
    max_waiting: int = Field(256, ge=0)
    wait_timeout_s: float = Field(30.0, gt=0)
    retry_after_s: int = Field(1, ge=1)
    prefix_block_chars: int = Field(256, ge=16)
    prefix_index_blocks: int = Field(65536, ge=16)
    rebuild_dead: bool = True
    # Priority class (docs/batches.md): batch lines take at most this share of a replica's
    # max_inflight; an interactive request that has waited preempt_after_s for a slot
    # preempts the youngest of them (null: never).
    batch_share: float = Field(0.5, gt=0, le=1)
    preempt_after_s: float | None = Field(0.02, ge=0)


class TierSpec(Frozen):
    engines: tuple[str, ...] = Field(min_length=1)
    fallback: str | None = None
    pool: PoolSpec = PoolSpec()
