"""``routing:``: how ``auto`` picks a tier (the thresholds, the classifier, a target
share of traffic per tier or an objective, sessions, escalation, the feedback loop),
validated once into frozen models (``policies/schema.py`` holds the whole file)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from policies.escalation_spec import EscalationSpec
from policies.feedback_spec import FeedbackConfig
from policies.frozen import Frozen
from policies.session_spec import SessionsConfig


class ClassifierConfig(Frozen):
    """The complexity classifier behind ``model: auto`` (absent: the tenant's default tier)."""

    model: str | None = None  # a .npz from ``tiergate train-classifier``; None: the shipped one
    # static: the table distilled from MiniLM (routers/static_embedder.py), ~1 % of its CPU
    embedder: Literal["onnx", "sentence-transformers", "static"] = "onnx"
    # int8 weights (ONNX only); auto: int8 where the CPU has AVX2 or an int8 dot product
    # (VNNI, AMX), where it is the cheaper graph, else fp32 (routers/cpu.py)
    quantize: bool | Literal["auto"] = "auto"
    max_tokens: int = Field(128, ge=8, le=512)  # of the last user message
    max_batch: int = Field(32, ge=1, le=1024)
    # 0: a batch is what queued while the previous one ran (no wait at low load)
    max_wait_ms: float = Field(0.0, ge=0, le=1000)
    threads: int | None = Field(None, ge=1, le=256)  # ONNX intra-op threads (None: 1)
    # Embedder processes (0: a thread in the gateway process, sharing the event loop's core
    # and its GIL); a dead or stuck one is restarted and its requests use the default tier.
    workers: int = Field(1, ge=0, le=16)
    worker_timeout_s: float = Field(10.0, gt=0, le=600)  # one batch, then the worker is stuck
    embedding_cache: int = Field(4096, ge=0, le=1_000_000)  # vectors of repeated prompts (LRU)
    # The per-tier quality model (``routing.objective``): a .npz from ``tiergate
    # train-classifier --quality``; None: the shipped one.
    quality: str | None = None


class TargetShareConfig(Frozen):
    """How ``routing.objective`` (its λ) and ``routing.target_share`` (its thresholds)
    learn from recent traffic."""

    window_s: float = Field(3600.0, ge=10)  # the recent traffic the quantiles come from
    buckets: int = Field(6, ge=1, le=60)  # the window in this many time buckets
    min_samples: int = Field(200, ge=1)  # fewer scores seen: ``thresholds`` still apply
    sync_s: float = Field(1.0, gt=0, le=60)  # replicas pool their counts this often


class ObjectiveConfig(Frozen):
    """``routing.objective``: ``{cost: 0.25}`` spends at most a quarter of what always the
    largest tier would, ``{quality: 0.95}`` reaches 95 % of the largest tier's expected
    quality at the least cost. Exactly one of the two."""

    cost: float | None = Field(None, gt=0, le=1)
    quality: float | None = Field(None, gt=0, le=1)
    # Completion tokens a tier is expected to write (its answer's price): one number for
    # every tier, or per tier.
    answer_tokens: int | dict[str, int] = 256
    # The quality model's head each tier stands for (default: its ladder, by position).
    reference: dict[str, str] = Field(default_factory=dict)
    # Requests choose only between the tiers of the objective's segment of the traffic's
    # predicted fixed-tier hull (routers/objective_segment.py); false: among every tier.
    segment: bool = True
    # A request whose segment choice is the segment's cheapest tier goes to a cheaper tier
    # its own predictions say is no worse (routers/objective.py, ``below_segment``). Off:
    # with the shipped model it gives back "never dominated" on a held-out set
    # (docs/classifier.md, "Trivial prompts and the small tier").
    dominance: bool = False

    @model_validator(mode="after")
    def _one(self) -> ObjectiveConfig:
        if (self.cost is None) == (self.quality is None):
            raise ValueError("routing.objective needs exactly one of cost or quality")
        return self

    @property
    def kind(self) -> str:
        return "cost" if self.cost is not None else "quality"

    @property
    def share(self) -> float:
        value = self.cost if self.cost is not None else self.quality
        assert value is not None  # the validator saw to it
        return value

    def answer_for(self, tier: str) -> int:
        if isinstance(self.answer_tokens, int):
            return self.answer_tokens
        return self.answer_tokens.get(tier, 256)


class RoutingConfig(Frozen):
    thresholds: tuple[float, float] = (0.3, 0.7)
    default_tier: str = "small"
    classifier: ClassifierConfig | None = None
    # Share of classified ``auto`` requests per tier (e.g. small 0.7, medium 0.2, large 0.1):
    # the thresholds become the score quantiles of recent traffic (shared by replicas).
    target_share: dict[str, float] | None = None
    # Each request to the tier with the best expected quality - λ · expected cost, λ from
    # recent traffic (shared by replicas) so that the objective holds: routers/objective.py.
    objective: ObjectiveConfig | None = None
    target: TargetShareConfig = TargetShareConfig()
    feedback: FeedbackConfig | None = None  # learn from traffic (policies/feedback_spec.py)
    # An agent's turns as one session (policies/session_spec.py); null: every turn alone.
    sessions: SessionsConfig | None = SessionsConfig()
    # The cheaper tier answers first when the router is unsure (policies/escalation_spec.py).
    escalation: EscalationSpec | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RoutingConfig:
        low, high = self.thresholds
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError("thresholds must satisfy 0 <= low <= high <= 1")
        return self


def _target_share_problems(shares: dict[str, float] | None, tiers: list[str]) -> list[str]:
    if shares is None:
        return []
    if set(shares) != set(tiers):
        return [f"routing.target_share must give a share for exactly the tiers {tiers}"]
    if len(tiers) > 3:
        return ["routing.target_share needs at most three tiers (two thresholds)"]
    if any(not 0.0 <= v <= 1.0 for v in shares.values()) or abs(sum(shares.values()) - 1) > 1e-6:
        return ["routing.target_share: shares must lie in [0, 1] and add up to 1"]
    return []


def _objective_problems(routing: RoutingConfig, tiers: list[str]) -> list[str]:
    objective = routing.objective
    if objective is None:
        return []
    problems = []
    if routing.target_share is not None:
        problems.append("routing: give objective or target_share, not both")
    named = set(objective.reference)
    if isinstance(objective.answer_tokens, dict):
        named |= set(objective.answer_tokens)
        if any(n < 0 for n in objective.answer_tokens.values()):
            problems.append("routing.objective.answer_tokens must not be negative")
    elif objective.answer_tokens < 0:
        problems.append("routing.objective.answer_tokens must not be negative")
    problems.extend(
        f"routing.objective names unknown tier {t!r}" for t in sorted(named - set(tiers))
    )
    return problems


def routing_problems(routing: RoutingConfig, tiers: list[str]) -> list[str]:
    """What is wrong with ``routing:`` against the file's tiers (a target share, the
    objective), for the one error ``GatewayConfig`` raises."""
    return [
        *_target_share_problems(routing.target_share, tiers),
        *_objective_problems(routing, tiers),
    ]
