"""Money saved by routing: what the always-large baseline would have charged, minus the cost.

The baseline is the last tier in the file (tiers are listed cheapest first), priced at
the dearest of its models for this usage.
"""

from __future__ import annotations

from policies.schema import GatewayConfig


def baseline_cost(
    config: GatewayConfig, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> float:
    largest = list(config.tiers.values())[-1]
    prices = [config.prices.get(config.engines[e].model) for e in largest.engines]
    return max(
        (p.cost(prompt_tokens, completion_tokens, cached_tokens) for p in prices if p is not None),
        default=0.0,
    )


def routing_saving(
    config: GatewayConfig,
    cost_usd: float,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
) -> float:
    baseline = baseline_cost(config, prompt_tokens, completion_tokens, cached_tokens)
    return max(baseline - cost_usd, 0.0)
