"""What a request may cost: worst cases before it runs, real costs after.

Pure functions of the config and the request; the budget store never sees a request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from backends.base import GenerationRequest, Usage
from gateway.money.part_pricing import non_text_bytes, non_text_parts, parts_upper_tokens
from policies.schema import GatewayConfig, TenantSpec
from routers.decision import permitted_tiers


@dataclass(frozen=True, slots=True)
class WorstCase:
    tier: str
    usd: float
    prompt_tokens: int  # upper estimate
    completion_tokens: int  # the cap the request runs under
    attempts: int = 1  # 2: an escalation's cheap attempt and the next tier's, held as one


TOOL_PROMPT_BYTES = 512


def prompt_bytes(generation: GenerationRequest) -> int:
    """Everything the model may read as text, as bytes: JSON of the messages and tools
    over-counts the text a little (keys, quotes), which keeps the estimate on the safe
    side. Image, audio and file parts are left out: their rules count them."""
    size = len(generation.prompt.encode()) if generation.prompt is not None else 0
    if generation.messages is not None:
        size += len(orjson.dumps(list(generation.messages)))
        size -= non_text_bytes(generation.messages)
    if generation.tools:
        # plus the instructions an engine may wrap them in (llama.cpp's are under 300 bytes)
        size += len(orjson.dumps(list(generation.tools))) + TOOL_PROMPT_BYTES
    if generation.response_format is not None:  # providers may write the schema into the prompt
        size += len(orjson.dumps(generation.response_format))
    return size


def prompt_upper_tokens(
    config: GatewayConfig, generation: GenerationRequest, tier: str | None = None
) -> int:
    """The most prompt tokens the request may be billed on ``tier`` (or on any model):
    its text by bytes, its other parts by the dearest rule of the models it may land on."""
    budgets = config.budgets
    messages = generation.messages or ()
    parts = 0
    if any(True for _ in non_text_parts(messages)):  # text only: no model's rules to look up
        models = config.models() if tier is None else tier_models(config, tier)
        parts = parts_upper_tokens(config, models, messages)
    return (
        math.ceil(prompt_bytes(generation) / budgets.prompt_bytes_per_token)
        + budgets.prompt_overhead_tokens
        + budgets.message_overhead_tokens * len(messages)
        + parts
    )


def default_output_cap(config: GatewayConfig, model: str) -> int:
    """What a request without ``max_tokens`` may generate on ``model``: its configured
    cap, else its engines' ``default_max_tokens``, else the global default."""
    budgets = config.budgets
    if model in budgets.max_output_tokens:
        return budgets.max_output_tokens[model]
    engine_defaults = [
        spec.default_max_tokens
        for spec in config.engines.values()
        if spec.model == model and spec.default_max_tokens is not None
    ]
    return max(engine_defaults, default=budgets.default_max_output_tokens)


def completion_cap(config: GatewayConfig, generation: GenerationRequest, tier: str) -> int:
    """The request's ``max_tokens``, or the largest default cap of the models it may land
    on (the request then runs with that cap, so it never outgrows its reservation)."""
    requested = generation.sampling.max_tokens
    if requested is not None:
        return requested
    return max(default_output_cap(config, m) for m in tier_models(config, tier))


def tier_chain(config: GatewayConfig, tier: str) -> list[str]:
    """The tier and every tier it may fail over to."""
    chain: list[str] = []
    current: str | None = tier
    while current is not None and current not in chain:
        chain.append(current)
        current = config.tiers[current].fallback
    return chain


def tier_models(config: GatewayConfig, tier: str) -> list[str]:
    return [
        config.engines[e].model for t in tier_chain(config, tier) for e in config.tiers[t].engines
    ]


def model_cost(config: GatewayConfig, model: str, usage: Usage, batch: bool = False) -> float:
    """What ``usage`` costs on ``model``; a batch line pays the model's batch share."""
    price = config.prices.get(model)
    if price is None:
        return 0.0
    cost = price.cost(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    return cost * price.batch if batch else cost


def batch_rate(config: GatewayConfig, model: str) -> float:
    """The share of its interactive price a batch line pays on ``model``."""
    price = config.prices.get(model)
    return 1.0 if price is None else price.batch


def model_cap(config: GatewayConfig, model: str, cap: int) -> int:
    """The completion tokens a request capped at ``cap`` may generate on ``model``."""
    return min(cap, config.budgets.max_output_tokens.get(model, cap))


def run_cap(config: GatewayConfig, tier: str, cap: int, pinned: str | None = None) -> int:
    """The ``max_tokens`` an engine request on ``tier`` runs with: no model the tier's
    pool may pick generates more than the reservation paid for on it."""
    if pinned is not None:
        return model_cap(config, pinned, cap)
    return min(model_cap(config, config.engines[e].model, cap) for e in config.tiers[tier].engines)


def text_upper_tokens(config: GatewayConfig, text_bytes: int) -> int:
    """An upper estimate of the tokens in ``text_bytes`` bytes of text, by the rule the
    prompt estimate uses (a CJK character is three bytes, so it is not undercounted)."""
    return math.ceil(text_bytes / config.budgets.prompt_bytes_per_token)


def worst_case(
    config: GatewayConfig,
    tier: str,
    prompt_tokens: int,
    cap: int,
    pinned: str | None = None,
    batch: bool = False,
) -> WorstCase:
    """The dearest model the request could land on (its tier, or any failover tier)."""
    models = tier_models(config, tier)
    if pinned is not None:
        fallbacks = tier_chain(config, tier)[1:]
        models = [pinned, *(m for t in fallbacks for m in tier_models(config, t))]
    usd = 0.0
    for model in models:
        usage = Usage(prompt_tokens, model_cap(config, model, cap))
        usd = max(usd, model_cost(config, model, usage, batch))
    return WorstCase(tier, usd, prompt_tokens, cap)


def downgrade_tiers(config: GatewayConfig, policy: TenantSpec, tier: str) -> list[str]:
    """``tier`` first, then the cheaper tiers the tenant may use (allowed tiers, never
    below ``min_tier``), most capable first."""
    order = list(config.tiers)
    cheaper = reversed(order[: order.index(tier)])
    permitted = permitted_tiers(config, policy)
    return [tier, *(t for t in cheaper if t in permitted)]


def admission_worst(
    config: GatewayConfig,
    generation: GenerationRequest,
    tier: str,
    policy: TenantSpec,
    pinned: str | None,
    batch: bool = False,
) -> tuple[list[WorstCase], int]:
    """What admitting a generation on ``tier`` holds: the worst cases of its tier and,
    for a ``downgrade`` tenant, of the cheaper tiers it may be moved to, most capable
    first (at batch prices for a batch line); and the tokens its rate limit counts."""
    rate_tokens = prompt_upper_tokens(config, generation, tier)
    rate_tokens += completion_cap(config, generation, tier)
    downgrade = policy.on_budget_exceeded == "downgrade"
    tiers = downgrade_tiers(config, policy, tier) if downgrade else [tier]
    return worst_cases(config, tiers, generation, pinned, batch), rate_tokens


def worst_cases(
    config: GatewayConfig,
    tiers: Sequence[str],
    generation: GenerationRequest,
    pinned: str | None,
    batch: bool = False,
) -> list[WorstCase]:
    return [
        worst_case(
            config,
            tier,
            prompt_upper_tokens(config, generation, tier),
            completion_cap(config, generation, tier),
            pinned if i == 0 else None,
            batch,
        )
        for i, tier in enumerate(tiers)
    ]


def escalation_worst(
    config: GatewayConfig, generation: GenerationRequest, tier: str, cheap: str, then: str
) -> WorstCase:
    """Both attempts of an escalation held as one candidate before the first runs: the
    cheap tier's worst case plus the next tier's (each over its failover chain), so the
    second attempt can never overspend. It stands for the router's ``tier``; both
    attempts run under the smaller of the two caps."""
    first, second = worst_cases(config, [cheap, then], generation, None)
    return WorstCase(
        tier,
        first.usd + second.usd,
        max(first.prompt_tokens, second.prompt_tokens),
        min(first.completion_tokens, second.completion_tokens),
        attempts=2,
    )
