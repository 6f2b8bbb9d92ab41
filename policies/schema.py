"""The config file, validated once into frozen models; code reads attributes, never dicts."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)

from policies.batches_spec import BatchesConfig
from policies.embedding_spec import EmbeddingSpec, embedding_problems
from policies.engine_spec import EngineSpec, TierSpec
from policies.escalation_spec import EscalationSpec, escalation_problems
from policies.feedback_spec import feedback_problems
from policies.frozen import Frozen
from policies.guardrails_spec import GuardrailsSpec, guardrails_problems
from policies.mcp_spec import McpCallLimit, McpConfig, ToolPattern, mcp_problems
from policies.part_tokens import PartTokens
from policies.responses_spec import ResponsesConfig
from policies.routing_spec import RoutingConfig, routing_problems
from policies.service_spec import (
    AdminConfig,
    LedgerConfig,
    MetricsConfig,
    ServerConfig,
)

DEFAULT_TIERS = ("small", "medium", "large")

# Tenant names and key ids become budget scopes (``key:TENANT:ID``), Redis key parts and
# metric labels: no separators (``:``, ``|``), whitespace or control characters, so two
# different names can never spell the same scope.
NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


class Price(Frozen):
    """USD per million tokens."""

    input: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
    output: float = Field(ge=0)
    # What a batch line pays, as a share of the prices above (OpenAI and Anthropic: half).
    batch: float = Field(0.5, ge=0, le=1)

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached_rate = self.input if self.cached_input is None else self.cached_input
        uncached = max(prompt_tokens - cached_tokens, 0)
        return (
            uncached * self.input + cached_tokens * cached_rate + completion_tokens * self.output
        ) / 1_000_000


# The largest cap a budget may have: in nano-dollars it stays well inside Redis's signed
# 64-bit integers (9.2e18), and an absurd value is a 400, not a 500.
MAX_LIMIT_USD = 1e9


class BudgetSpec(Frozen):
    """A spending cap in USD over a window (UTC days and months; ``total`` never resets)."""

    limit_usd: float = Field(ge=0, le=MAX_LIMIT_USD)
    window: Literal["daily", "monthly", "total"] = "daily"


class RateLimitSpec(Frozen):
    """Sliding one-minute windows; ``None`` means no limit of that kind."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)


class ApiKey(Frozen):
    id: Name
    budget: BudgetSpec | None = None
    rate_limit: RateLimitSpec | None = None
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    from_env: str | None = None
    guardrails: GuardrailsSpec | None = None  # replaces the tenant's for this key

    @model_validator(mode="after")
    def _one_source(self) -> ApiKey:
        if (self.sha256 is None) == (self.from_env is None):
            raise ValueError("give exactly one of sha256 or from_env")
        return self


# Cosine similarity a paraphrase must reach for a semantic hit (MiniLM), before the
# verifier (semantic_verify). The held-out pairs give zero false hits with the rules and
# the learned verifier at 0.001; 0.85 keeps the verifier's candidates close
# (bench/experiments/verifier_candidates.py, docs/cache.md).
DEFAULT_SEMANTIC_THRESHOLD = 0.85


class VerifyTarget(Frozen):
    """A learned verifier decides what the rules leave open (routers/verifier/rules.py):
    at most this share of the near-miss candidates that reach it may be served, the
    threshold set from the calibration table shipped with the model. The share is
    measured on the calibration pairs (``meta.json`` ``bounds`` and ``by_source``); on
    other questions it is an estimate, not a guarantee (docs/cache.md, "What
    max_wrong_rate bounds")."""

    max_wrong_rate: float = Field(gt=0.0, le=0.1)


def _verify_kind(value: Any) -> str:
    return "mode" if isinstance(value, str) else "target"


# ``strict`` / ``guard``, or ``{max_wrong_rate: R}``; an error names the branch it took
# (``semantic_verify.mode`` or ``semantic_verify.target.max_wrong_rate``).
SemanticVerify = Annotated[
    Annotated[Literal["strict", "guard"], Tag("mode")] | Annotated[VerifyTarget, Tag("target")],
    Discriminator(_verify_kind),
]


class CachePolicy(Frozen):
    """One tenant's prompt cache: what is stored, for how long, and what a hit costs."""

    enabled: bool = True
    ttl_s: float = Field(3600.0, gt=0)
    max_entries: int = Field(10_000, ge=1)
    # Requests at or below this temperature are cacheable (unset means OpenAI's 1.0);
    # a request with a fixed seed is cacheable at any temperature when cache_seeded.
    max_temperature: float = Field(0.0, ge=0.0, le=2.0)
    cache_seeded: bool = True
    semantic: bool = True
    semantic_threshold: float = Field(DEFAULT_SEMANTIC_THRESHOLD, gt=0.0, le=1.0)
    # After the similarity test: "strict" serves a hit only when every difference between
    # the two questions keeps the meaning (routers/verifier/alignment.py), the zero-risk
    # setting; {max_wrong_rate: R} lets the learned verifier accept what the rules leave
    # open at that error bound; "guard" trades precision for recall (docs/cache.md).
    semantic_verify: SemanticVerify = VerifyTarget(max_wrong_rate=0.001)
    # Share of the original cost a hit is charged: 0 = free, 1 = full price.
    hit_charge: float = Field(0.0, ge=0.0, le=1.0)


class TenantSpec(Frozen):
    keys: tuple[ApiKey, ...] = Field(min_length=1)
    default_tier: str = "small"
    allowed_tiers: tuple[str, ...] | None = None
    budget: BudgetSpec | None = None
    # Over budget: refuse (429 insufficient_quota) or move to the most capable tier that fits.
    on_budget_exceeded: Literal["reject", "downgrade"] = "reject"
    rate_limit: RateLimitSpec | None = None
    # Budget / rate-limit store unreachable: refuse (503) unless these say to let requests through.
    budget_fail_open: bool = False
    rate_limit_fail_open: bool = False
    cache: CachePolicy = CachePolicy()
    min_tier: str | None = None  # ``auto`` never routes below this tier
    max_tier: str | None = None  # ... nor above this one
    allow_tier_header: bool = False  # may force a tier with ``x-tiergate-tier``
    # Hosted tools the gateway cannot run (web_search…): removed and named, or a 400.
    compat: Literal["lenient", "strict"] = "lenient"
    # The MCP tools (``/mcp``, policies/mcp_spec.py) this tenant's keys may list and call:
    # ``SERVER.TOOL`` patterns, ``*`` a wildcard; none by default. Their calls are limited
    # per minute on their own, and their arguments enter the ledger only when logged.
    mcp_tools: tuple[ToolPattern, ...] = ()
    mcp_rate_limit: McpCallLimit | None = None
    mcp_log_arguments: bool = False
    # PII and secrets: redact, block, keep local, log (policies/guardrails_spec.py).
    guardrails: GuardrailsSpec | None = None
    # This tenant's escalation (policies/escalation_spec.py), instead of routing.escalation.
    escalation: EscalationSpec | None = None

    def escalation_of(self, routing: RoutingConfig) -> EscalationSpec | None:
        """The escalation this tenant's ``auto`` requests run by (its own, else the
        gateway's); None when off."""
        spec = self.escalation if self.escalation is not None else routing.escalation
        return spec if spec is not None and spec.on else None


class CacheConfig(Frozen):
    """Gateway-wide cache settings; per-tenant policy lives in ``TenantSpec.cache``."""

    # The semantic cache needs the sentence embedder (sentence-transformers, torch).
    semantic: bool = False
    embedder_model: str | None = None
    # The learned verifier's folder (ONNX + tokenizer + calibration); None: the shipped one.
    verifier_model: str | None = None
    # Where semantic vectors are searched: auto = Redis 8 vector sets when the server has
    # them, else a per-replica index synced through a Redis stream (memory store: in process).
    index: Literal["auto", "vectorset", "stream"] = "auto"
    # A cache call slower than this is abandoned and the request served without the cache.
    timeout_s: float = Field(0.1, gt=0)
    # After a failure the cache is skipped for this long instead of timing out per request.
    retry_after_s: float = Field(1.0, ge=0)
    stream_maxlen: int = Field(100_000, ge=1000)
    # Every cache key starts with this (tests and side-by-side deployments use their own).
    key_prefix: str = Field("tg:cache", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")


class BudgetsConfig(Frozen):
    """How reservations are sized and kept; per-tenant and per-key caps live on those."""

    global_budget: BudgetSpec | None = None
    reservation_ttl_s: float = Field(120.0, gt=0)
    # Worst case for a prompt: a token never covers less than one byte (byte-level BPE), so
    # bytes / 1 is safe; a larger value reserves less but can undercount.
    prompt_bytes_per_token: float = Field(1.0, gt=0)
    prompt_overhead_tokens: int = Field(16, ge=0)
    message_overhead_tokens: int = Field(8, ge=0)
    # The completion cap used (and enforced) when a request sets no max_tokens and neither
    # max_output_tokens[model] nor the engine's default_max_tokens option gives one.
    default_max_output_tokens: int = Field(4096, ge=1)
    # Where settles the Redis store refuses are journaled until it takes them (one file
    # per process; unset: $TIERGATE_STATE_DIR/journal, else ~/.local/state/tiergate/journal).
    journal_dir: str | None = None
    journal_replay_s: float = Field(1.0, gt=0)
    max_output_tokens: dict[str, int] = Field(default_factory=dict)
    # What an image, audio or file part may cost on a model (policies/part_tokens.py); a
    # priced model without a rule for a modality refuses such parts (400 unsupported_content).
    part_tokens: dict[str, PartTokens] = Field(default_factory=dict)


class GatewayConfig(Frozen):
    server: ServerConfig = ServerConfig()
    redis_url: str | None = None
    # The URL is a seed node of a Redis Cluster (env TIERGATE_REDIS_CLUSTER=1); see
    # docs/redis-keys.md for the key layout and its slots.
    redis_cluster: bool = False
    # Every Redis key starts with this, so several deployments (or tests) can share one server.
    redis_prefix: str = Field("tg", pattern=r"^[A-Za-z0-9_.:-]+$")
    # How long a Redis call (or a wait for a pooled connection) may take before the
    # store counts as unreachable; and the pool size per process.
    redis_timeout_s: float = Field(0.5, gt=0)
    redis_max_connections: int = Field(64, ge=1)
    # One loop turn's single commands share a round trip (policies/stores/redis_coalesce.py).
    redis_pipelining: bool = True
    budgets: BudgetsConfig = BudgetsConfig()
    ledger: LedgerConfig = LedgerConfig()
    engines: dict[str, EngineSpec] = Field(min_length=1)
    tiers: dict[str, TierSpec] = Field(min_length=1)
    prices: dict[str, Price] = Field(default_factory=dict)
    tenants: dict[Name, TenantSpec] = Field(default_factory=dict)
    routing: RoutingConfig = RoutingConfig()
    admin: AdminConfig = AdminConfig()
    metrics: MetricsConfig = MetricsConfig()
    cache: CacheConfig = CacheConfig()
    embeddings: dict[str, EmbeddingSpec] = Field(default_factory=dict)  # POST /v1/embeddings
    responses: ResponsesConfig = ResponsesConfig()  # stored /v1/responses
    batches: BatchesConfig = BatchesConfig()  # /v1/files, /v1/batches, /v1/messages/batches
    mcp: McpConfig = McpConfig()  # /mcp: the upstream MCP servers (policies/mcp_spec.py)

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        problems: list[str] = []
        for tier_name, tier in self.tiers.items():
            for engine in tier.engines:
                if engine not in self.engines:
                    problems.append(f"tier {tier_name!r} names unknown engine {engine!r}")
            if tier.fallback is not None and tier.fallback not in self.tiers:
                problems.append(f"tier {tier_name!r} falls back to unknown tier {tier.fallback!r}")
        if self.routing.default_tier not in self.tiers:
            problems.append(f"routing.default_tier {self.routing.default_tier!r} is not a tier")
        problems.extend(routing_problems(self.routing, list(self.tiers)))
        served = {spec.model for spec in self.engines.values()}
        problems.extend(feedback_problems(self.routing.feedback, list(self.tiers), served))
        for tenant_name, tenant in self.tenants.items():
            named = (
                tenant.default_tier,
                tenant.min_tier,
                tenant.max_tier,
                *(tenant.allowed_tiers or ()),
            )
            for tier_name in (t for t in named if t is not None):
                if tier_name not in self.tiers:
                    problems.append(f"tenant {tenant_name!r} names unknown tier {tier_name!r}")
            order = list(self.tiers)
            if (
                tenant.min_tier in self.tiers
                and tenant.max_tier in self.tiers
                and order.index(tenant.min_tier) > order.index(tenant.max_tier)
            ):
                problems.append(f"tenant {tenant_name!r}: min_tier is above max_tier")
        for spec in self.engines.values():
            if spec.model not in self.prices:
                problems.append(f"model {spec.model!r} has no entry in prices")
        for model in sorted(set(self.budgets.part_tokens) - served):
            problems.append(f"budgets.part_tokens names {model!r}, which no engine serves")
        local = self.routing.classifier is not None
        problems.extend(embedding_problems(self.embeddings, self.engines, self.tiers, local))
        problems.extend(
            f"embedding model {m!r} has no entry in prices"
            for m, spec in self.embeddings.items()
            if spec.engine is None and m not in self.prices
        )
        problems.extend(
            mcp_problems(
                self.mcp,
                {name: [k.id for k in t.keys] for name, t in self.tenants.items()},
                {f"tenants.{name}.mcp_tools": t.mcp_tools for name, t in self.tenants.items()},
            )
        )
        problems.extend(guardrails_problems(self.guardrail_blocks()))
        escalations = {"routing.escalation": self.routing.escalation}
        escalations.update(
            {f"tenants.{n}.escalation": t.escalation for n, t in self.tenants.items()}
        )
        problems.extend(escalation_problems(escalations, self.engines, self.tiers))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def guardrail_blocks(self) -> dict[str, GuardrailsSpec]:
        """Every ``guardrails:`` block, by where it is (``tenants.T.keys.K.guardrails``)."""
        blocks = {}
        for name, tenant in self.tenants.items():
            if tenant.guardrails is not None:
                blocks[f"tenants.{name}.guardrails"] = tenant.guardrails
            for key in tenant.keys:
                if key.guardrails is not None:
                    blocks[f"tenants.{name}.keys.{key.id}.guardrails"] = key.guardrails
        return blocks

    def tier_of_model(self, model: str) -> str | None:
        """The first tier (in file order) whose pool serves ``model``."""
        for tier_name, tier in self.tiers.items():
            if any(self.engines[e].model == model for e in tier.engines):
                return tier_name
        return None

    def models(self) -> list[str]:
        """The chat and completion models (engines that serve embeddings are not)."""
        embedding = {s.engine for s in self.embeddings.values() if s.engine is not None}
        return sorted({spec.model for name, spec in self.engines.items() if name not in embedding})
