"""The process-level settings of the config file: the HTTP server, the admin key, metrics
and the autoscaling signal, the ledger's size."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from policies.frozen import Frozen


class ServerConfig(Frozen):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    request_timeout_s: float = Field(600.0, gt=0)
    timing_header: bool = False  # per-stage ``Server-Timing`` on responses (for bench/)
    # HTTP hardening (uvicorn): a stream write that waits this long (a client that stopped
    # reading) ends the stream; request headers must arrive within header_timeout_s;
    # idle keep-alive connections close after keep_alive_s; past limit_concurrency open
    # connections or requests, new requests get 503.
    write_timeout_s: float = Field(30.0, gt=0)
    header_timeout_s: float = Field(10.0, gt=0)
    keep_alive_s: float = Field(5.0, gt=0)
    limit_concurrency: int | None = Field(4096, ge=1)
    # On SIGTERM, streams in flight get this long to finish (an engine node: the longest one).
    shutdown_grace_s: int = Field(10, ge=1, le=3600)


class AdminConfig(Frozen):
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    key_from_env: str | None = "TIERGATE_ADMIN_KEY"
    session_ttl_s: float = Field(8 * 3600.0, gt=0, le=7 * 86_400)
    # A raw admin key (from the environment) shorter than this refuses to start.
    min_key_length: int = Field(16, ge=8)
    # Wrong admin-key guesses (login form or Bearer) allowed per minute per client
    # address, and from all addresses together; past either, 429 until the minute ends.
    failures_per_minute: int = Field(5, ge=1)
    failures_per_minute_total: int = Field(50, ge=1)


class AutoscaleConfig(Frozen):
    """The per-tier replica recommendation: up when slow or busy, down when fast and idle."""

    window_s: float = Field(60.0, gt=0)
    latency: Literal["ttft", "e2e"] = "ttft"
    up_p99_s: float = Field(2.0, gt=0)
    up_utilisation: float = Field(0.8, gt=0, le=1)
    down_p99_s: float = Field(0.5, gt=0)
    down_utilisation: float = Field(0.3, ge=0, le=1)
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> AutoscaleConfig:
        if self.down_p99_s > self.up_p99_s or self.down_utilisation > self.up_utilisation:
            raise ValueError("scale-down thresholds must not exceed scale-up thresholds")
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self


class MetricsConfig(Frozen):
    # On: series carry a tenant label (few tenants, names not private). Off by default.
    tenant_label: bool = False
    # When set, ``GET /metrics`` needs ``Authorization: Bearer TOKEN`` (token from this
    # environment variable, or its SHA-256 in token_sha256).
    token_from_env: str | None = None
    token_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    autoscale: AutoscaleConfig = AutoscaleConfig()


class LedgerConfig(Frozen):
    """How much of the spend ledger is kept; totals live in per-day aggregates either way."""

    # Redis: the event stream keeps about this many newest events (approximate trim).
    stream_max_events: int = Field(1_000_000, ge=1000)
    # One process: only the newest events (the dashboard shows a few hundred of them).
    memory_events: int = Field(10_000, ge=100)
    retention_days: int = Field(400, ge=1, le=3660)  # per-day aggregates
    # The client's ``metadata`` kept on one event, in bytes of its JSON: pairs past it are
    # dropped and the event says so (``policies.stores.ledger.bounded_metadata``).
    metadata_bytes: int = Field(1024, ge=128, le=16_384)
