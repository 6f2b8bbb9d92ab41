"""Money saved by routing: what the always-large baseline would have charged, minus the cost.

The baseline is the last tier in the file (tiers are listed cheapest first), priced at
its first engine's model.
"""

from __future__ import annotations

from policies.schema import GatewayConfig, Price


def baseline_price(config: GatewayConfig) -> Price | None:
    largest = list(config.tiers.values())[-1]
    return config.prices.get(config.engines[largest.engines[0]].model)


def routing_saving(
    config: GatewayConfig,
    cost_usd: float,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
) -> float:
    price = baseline_price(config)
    if price is None:
        return 0.0
    return max(price.cost(prompt_tokens, completion_tokens, cached_tokens) - cost_usd, 0.0)
