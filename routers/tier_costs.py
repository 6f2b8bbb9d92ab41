"""What each tier would charge a request, from the config's prices: the cost side of
``routing.objective`` (``routers/objective.py``) and of a session's turn, where the
prefix a tier already caches is billed at its cached-input price.

Tokens are estimated from characters (4 a token, plus 8 for the chat template), and the
answer is the objective's expected length for the tier (``ObjectiveConfig.answer_for``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from policies.routing_spec import ObjectiveConfig
from policies.schema import GatewayConfig

Array = npt.NDArray[np.float64]


def tier_prices(config: GatewayConfig, tier: str) -> tuple[float, float]:
    """USD per million (input, output) tokens of a tier: the mean over its engines."""
    prices = [config.prices[config.engines[e].model] for e in config.tiers[tier].engines]
    return (
        sum(p.input for p in prices) / len(prices),
        sum(p.output for p in prices) / len(prices),
    )


def expected_costs(config: GatewayConfig, objective: ObjectiveConfig, chars: int) -> list[float]:
    """What each tier would charge for a prompt of ``chars`` characters (cheapest first)."""
    tokens = chars / 4.0 + 8.0
    out = []
    for tier in config.tiers:
        price_in, price_out = tier_prices(config, tier)
        out.append((tokens * price_in + objective.answer_for(tier) * price_out) / 1e6)
    return out


def cached_price(config: GatewayConfig, tier: str) -> float:
    """USD per million cached input tokens on a tier (its engines' mean; a model without a
    ``cached_input`` price bills cached tokens at full input)."""
    prices = [config.prices[config.engines[e].model] for e in config.tiers[tier].engines]
    rates = [p.input if p.cached_input is None else p.cached_input for p in prices]
    return sum(rates) / len(rates)


def prefix_costs(
    config: GatewayConfig, objective: ObjectiveConfig, chars: int, cached: Mapping[str, int]
) -> list[float]:
    """``expected_costs`` for a session's turn: on a tier that caches ``cached[tier]``
    characters of the conversation's prefix, those are billed at the cached-input price
    and only the rest at full price; every other tier pays full input on the whole
    context (what a switch costs)."""
    tokens = chars / 4.0 + 8.0
    out = []
    for tier in config.tiers:
        price_in, price_out = tier_prices(config, tier)
        held = min(cached.get(tier, 0), chars) / 4.0
        inputs = (tokens - held) * price_in + held * cached_price(config, tier)
        out.append((inputs + objective.answer_for(tier) * price_out) / 1e6)
    return out


def cost_matrix(config: GatewayConfig, objective: ObjectiveConfig, chars: Array) -> Array:
    """``(prompts, tiers)`` USD: input price x prompt tokens + output price x answer tokens."""
    tokens = np.asarray(chars, dtype=np.float64)[:, None] / 4.0 + 8.0
    prices = np.asarray([tier_prices(config, t) for t in config.tiers])
    answers = np.asarray([objective.answer_for(t) for t in config.tiers], dtype=np.float64)
    cost: Array = (tokens * prices[None, :, 0] + (answers * prices[:, 1])[None, :]) / 1e6
    return cost
