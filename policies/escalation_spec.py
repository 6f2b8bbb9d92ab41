"""``routing.escalation`` (and a tenant's ``escalation``): when the cheaper tier answers
first, and how its answer is judged (docs/routing.md, "Escalation").

The judge reads what the engine already returns: the answer's token log-probabilities,
reduced to one number (``signal``). An answer whose number is at or above ``threshold``
is kept; below it, the next tier is asked and its answer is the one the client gets.
Engines whose answers carry no log-probabilities cannot be judged: a tier that may answer
first must be served by engines that return them (``escalation_problems``). A learned
scorer on prompt + answer (the issue's optional judge) is not built: without
log-probabilities escalation is a config error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from backends.registry import BACKENDS
from policies.engine_spec import EngineSpec, TierSpec
from policies.frozen import Frozen

# The default when a block sets no threshold: the 10 % quantile of the answer's token
# log-probabilities below which the cheap answer is re-asked one tier up. It is nobody's
# calibration: set your own from records of your tiers' answers, as ``config/gateway.yaml``
# does for the embedded tiers (``python -m bench.live.escalate`` on the live bench's FIT
# records, docs/routing.md).
DEFAULT_THRESHOLD = -2.5


class EscalationSpec(Frozen):
    """``off``: the router's tier answers. ``unsure``: when the router's top two tiers
    score within ``margin`` of each other, the cheaper of the two answers first.
    ``always``: every ``auto`` request tries the tier below the one above first (the
    router's tier and the next tier up; at the top, the tier below and the router's)."""

    mode: Literal["off", "unsure", "always"] = "off"
    # The router is unsure when its top two tiers' values (the objective's quality -
    # λ·cost, or the score's distance to a threshold) lie within this of each other.
    margin: float = Field(0.1, ge=0, le=1)
    # What the answer's token log-probabilities are reduced to: their mean, a quantile
    # (Gupta et al., ICLR 2024: a low quantile beats the mean), or the least.
    signal: Literal["mean", "quantile", "min"] = "quantile"
    quantile: float = Field(0.1, ge=0, le=1)
    # Keep the cheap answer when the signal is at or above this (log-probability, ≤ 0).
    threshold: float = Field(DEFAULT_THRESHOLD, le=0)

    @property
    def on(self) -> bool:
        return self.mode != "off"


def engine_logprobs(spec: EngineSpec) -> bool:
    """Whether this engine's answers carry token log-probabilities: the engine's own
    ``logprobs`` when set, else its backend's declaration (``backends.registry``)."""
    if spec.logprobs is not None:
        return spec.logprobs
    return BACKENDS[spec.backend].logprobs


def escalation_problems(
    specs: Mapping[str, EscalationSpec | None],
    engines: Mapping[str, EngineSpec],
    tiers: Mapping[str, TierSpec],
) -> list[str]:
    """``specs``: where each escalation block is set (``routing.escalation``,
    ``tenants.NAME.escalation``). A tier that may answer first (every tier but the
    dearest) must be served only by engines that return log-probabilities."""
    where = [name for name, spec in specs.items() if spec is not None and spec.on]
    if not where:
        return []
    problems = []
    for tier_name in list(tiers)[:-1]:  # the dearest tier is never the cheap attempt
        for engine_name in tiers[tier_name].engines:
            engine = engines.get(engine_name)
            if engine is None or engine_logprobs(engine):
                continue
            problems.append(
                f"{where[0]}: tier {tier_name!r} may answer first, but engine "
                f"{engine_name!r} (backend {engine.backend!r}) returns no token "
                "log-probabilities to judge its answer by; turn escalation off, or set "
                f"engines.{engine_name}.logprobs: true if its server returns them"
            )
    return problems
