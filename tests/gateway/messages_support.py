"""What the ``/v1/messages`` tests share: a gateway on the fake engines (the fake plays a
tool-calling model; tenants with ``compat: strict``, a rate limit and an empty budget; an
image-reading large tier) and the ``anthropic`` SDK's client for it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic

from tests.gateway.budget_support import REDIS_URL, redis_prefix
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

WEATHER = {
    "name": "get_weather",
    "description": "The weather forecast for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
SCRIPT = [{"when": "weather", "call": "get_weather", "arguments": {"city": "Paris", "days": 3}}]
ASK = "What is the weather in Paris for the next 3 days?"
PNG = "iVBORw0KGgo="  # a PNG signature: what the part pricing reads is its rule
STRICT_KEY = "tg-strict-key-000222333"
LIMITED_KEY = "tg-limited-key-000444555"
BROKE_KEY = "tg-broke-key-000666777"


def config_for(prefix: str) -> dict[str, Any]:
    config = fake_config(tools=True, tool_script=SCRIPT)
    config["tenants"]["strict"] = {
        "keys": [{"id": "strict-1", "from_env": "TIERGATE_STRICT_KEY"}],
        "compat": "strict",
    }
    config["tenants"]["limited"] = {
        "keys": [{"id": "limited-1", "from_env": "TIERGATE_LIMITED_KEY"}],
        "rate_limit": {"requests_per_minute": 1},
    }
    config["tenants"]["broke"] = {
        "keys": [{"id": "broke-1", "from_env": "TIERGATE_BROKE_KEY"}],
        "budget": {"limit_usd": 0.0, "window": "total"},
    }
    config["engines"]["fake-large"]["modalities"] = ["text", "image"]
    config["budgets"] = {"part_tokens": {"fake-large": {"image": 1000}}}  # priced: needs a rule
    config["redis_url"], config["redis_prefix"] = REDIS_URL, prefix
    return config


@contextmanager
def messages_gateway() -> Iterator[RunningGateway]:
    os.environ["TIERGATE_STRICT_KEY"] = STRICT_KEY
    os.environ["TIERGATE_LIMITED_KEY"] = LIMITED_KEY
    os.environ["TIERGATE_BROKE_KEY"] = BROKE_KEY
    with redis_prefix() as prefix, running_gateway(config_for(prefix)) as running:
        yield running


def client_for(gateway: RunningGateway, key: str = TEST_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base_url, api_key=key, max_retries=0)


def fresh() -> dict[str, str]:
    return {"cache-control": "no-cache"}
