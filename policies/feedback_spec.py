"""``routing.feedback``: the router learning from its own traffic (docs/classifier.md,
"Learning from traffic").

A share of classified ``auto`` requests is answered a second time, on the next tier up
(the largest tier's: on the one below), after the client has its answer; a judge says
whether the cheaper of the two answers was acceptable. Clients add verdicts with
``POST /v1/feedback``. The labels refit the per-tier quality model in the background.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from pydantic import Field, model_validator

from policies.frozen import Frozen

# The budget scope every shadow answer and judge call is charged to (never a tenant's).
OPERATOR_SCOPE = "operator:feedback"


class JudgeSpec(Frozen):
    """Who labels a shadow pair: exactly one of ``tier``, ``model`` or ``labels``."""

    tier: str | None = None  # a configured tier answers the rubric
    model: str | None = None  # a configured model id (pinned, on the tier that serves it)
    # A JSONL file of known per-tier correctness ({"prompt", "tiers": {tier: 0|1}}): the
    # judge of a replay of labelled data, which reveals each known row's label.
    labels: str | None = None
    rubric: str | None = None  # a rubric file; None: routers/rubrics/judge.md
    max_tokens: int = Field(96, ge=8, le=4096)  # of the judge's answer

    @model_validator(mode="after")
    def _one(self) -> JudgeSpec:
        if sum(x is not None for x in (self.tier, self.model, self.labels)) != 1:
            raise ValueError("judge: give exactly one of tier, model or labels")
        return self


class RefitSpec(Frozen):
    """When and how the per-tier quality model is refitted from the labels."""

    online: bool = True  # refit in the background (else only train-classifier --from-traffic)
    min_labels: int = Field(200, ge=10)  # fewer labels in the store: no refit
    every: int = Field(200, ge=1)  # new labels since the last refit before the next one
    check_s: float = Field(30.0, gt=0, le=3600)  # how often a replica looks
    holdout: float = Field(0.25, gt=0, lt=1)  # the newest share of labels, never trained on
    directions: int = Field(8, ge=0, le=64)  # embedding directions the refit may use
    # Pull toward the base model (L2 on the correction): 100 routed best at equal cost on
    # the training family's three-tier rows (ARC-Challenge; docs/classifier.md).
    ridge: float = Field(100.0, gt=0)
    # The refit must beat what serves by this much log-loss on the hold-out to serve.
    margin: float = Field(0.0, ge=0)


class OperatorBudget(Frozen):
    """The cap on scope ``operator:feedback`` (None: uncapped, still counted)."""

    limit_usd: float | None = Field(None, ge=0)
    window: Literal["daily", "monthly", "total"] = "daily"


class FeedbackConfig(Frozen):
    sample: float = Field(0.01, ge=0, le=1)  # share of classified auto requests shadowed
    judge: JudgeSpec
    budget: OperatorBudget = OperatorBudget()
    max_concurrent: int = Field(4, ge=1, le=1024)  # shadows in flight; more are dropped
    max_tokens: int = Field(512, ge=1)  # cap of a shadow answer
    # The per-request record POST /v1/feedback needs: kept this long, at most this many.
    record_ttl_s: float = Field(86_400.0, gt=0, le=30 * 86_400)
    max_records: int = Field(100_000, ge=100)
    # Records are written in batches this often (one store call each: ~0.2 ms of client CPU)
    record_flush_s: float = Field(1.0, gt=0, le=10)
    max_labels: int = Field(20_000, ge=100)  # the newest labels kept ...
    label_ttl_days: float = Field(30.0, gt=0, le=3660)  # ... and none older than this
    refit: RefitSpec = RefitSpec()


def feedback_problems(
    spec: FeedbackConfig | None, tiers: Sequence[str], models: Collection[str]
) -> list[str]:
    """What the rest of the config must provide for ``routing.feedback``."""
    if spec is None:
        return []
    problems = []
    if len(tiers) < 2:
        problems.append("routing.feedback needs at least two tiers to compare")
    judge = spec.judge
    if judge.tier is not None and judge.tier not in tiers:
        problems.append(f"routing.feedback.judge.tier {judge.tier!r} is not a tier")
    if judge.model is not None and judge.model not in models:
        problems.append(f"routing.feedback.judge.model {judge.model!r} is served by no engine")
    return problems
