"""A cached answer is served only from a tier (and model) the request could have had live:
a forced tier, a key's scope, a tenant's ``max_tier``, a budget downgrade and a key's
allowed models each hold for hits, exact and semantic; ``auto`` requests keep sharing
entries across the tiers they may use. Through a real gateway (uvicorn, the official
client) on Redis 7, the real sentence model for the semantic index."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from policies.schema import GatewayConfig
from tests.redis_servers import REDIS7_URL, cache_prefix, delete_prefix
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow  # loads the sentence model

ADMIN_KEY = "tg-admin-key-for-cache-tier-tests"


class Policy:
    """The config the gateway reloads from (``POST /admin/api/policies/reload``)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def __call__(self) -> GatewayConfig:
        return GatewayConfig.model_validate(copy.deepcopy(self.raw))


@pytest.fixture(scope="module")
def policy() -> Policy:
    config = fake_config()
    config["redis_url"] = REDIS7_URL
    config["cache"] = {"semantic": True, "key_prefix": cache_prefix()}
    config["admin"] = {"key_from_env": "TIERGATE_CACHE_TIER_ADMIN"}
    config["tenants"]["acme"].update(allow_tier_header=True, on_budget_exceeded="downgrade")
    return Policy(config)


@pytest.fixture(scope="module")
def gateway(policy: Policy) -> Iterator[RunningGateway]:
    monkey = pytest.MonkeyPatch()
    monkey.setenv("TIERGATE_CACHE_TIER_ADMIN", ADMIN_KEY)
    try:
        with running_gateway(policy(), policy) as running:
            yield running
    finally:
        monkey.undo()
        delete_prefix(REDIS7_URL, policy.raw["cache"]["key_prefix"])


def ask(
    gateway: RunningGateway,
    content: str,
    *,
    key: str = TEST_KEY,
    model: str = "auto",
    tier: str | None = None,
) -> dict[str, str]:
    """The response headers of one chat request (temperature 0: cacheable)."""
    api = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
    headers = {"x-tiergate-tier": tier} if tier is not None else None
    raw = api.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        temperature=0,
        extra_headers=headers,
    )
    raw.parse()
    return dict(raw.headers)


def served(headers: dict[str, str]) -> tuple[str, str]:
    return headers["x-tiergate-cache"], headers["x-tiergate-tier"]


def managed_key(gateway: RunningGateway, **scope: Any) -> str:
    answer = httpx.post(
        gateway.base_url + "/admin/api/keys",
        json={"tenant": "acme", **scope},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert answer.status_code == 201, answer.text
    key: str = answer.json()["key"]
    return key


def test_a_forced_tier_is_never_served_another_tiers_answer(gateway: RunningGateway) -> None:
    question = "Which planet is known as the red planet?"
    assert served(ask(gateway, question)) == ("miss", "small")
    assert served(ask(gateway, question)) == ("exact", "small")
    assert served(ask(gateway, question, tier="medium")) == ("miss", "medium")
    assert served(ask(gateway, question, tier="medium")) == ("exact", "medium")
    # A paraphrase forced to large finds neither the small nor the medium answer.
    again = "Which planet is known as the red planet, please?"
    assert served(ask(gateway, again, tier="large")) == ("miss", "large")
    # ``auto`` may use any tier: it shares the entry the last request left.
    assert served(ask(gateway, question)) == ("exact", "medium")


def test_a_scoped_key_never_gets_a_tier_outside_its_scope(gateway: RunningGateway) -> None:
    question = "What is the capital city of Australia?"
    assert served(ask(gateway, question, tier="large")) == ("miss", "large")
    small_only = managed_key(gateway, allowed_tiers=["small"])
    # A paraphrase would find the large answer in the semantic index: not for this key.
    paraphrase = "What is the capital city of Australia, please?"
    assert served(ask(gateway, paraphrase, key=small_only)) == ("miss", "small")
    # Nor the exact entry (the paraphrase's small answer, a semantic neighbour, it may have).
    assert served(ask(gateway, question, key=small_only))[1] == "small"


def test_a_budget_downgrade_is_honoured_by_hits(gateway: RunningGateway) -> None:
    question = "How many bones are in the adult human body?"
    assert served(ask(gateway, question, model="large")) == ("miss", "large")
    assert served(ask(gateway, question, model="large")) == ("exact", "large")
    # A key whose budget cannot hold large's worst case is moved to a cheaper tier: the
    # large answer in the cache is not one it may have.
    poor = managed_key(gateway, budget={"limit_usd": 0.002, "window": "daily"})
    counters = gateway.state.parts.cache.counters  # type: ignore[union-attr]
    hits, declined = counters.exact_hits, counters.refused_by_reason.get("budget", 0)
    headers = ask(gateway, question, key=poor, model="large")
    assert served(headers)[1] != "large", headers
    assert headers["x-tiergate-downgraded"].startswith("large->")
    assert headers["x-tiergate-cache"] == "miss"
    # Declined, not a hit taken back: counted once, as refused for the budget.
    assert counters.exact_hits == hits
    assert counters.refused_by_reason["budget"] == declined + 1


def test_a_keys_allowed_models_are_honoured_with_an_entry_in_the_cache(
    gateway: RunningGateway,
) -> None:
    question = "What is the chemical symbol for gold?"
    assert served(ask(gateway, question, model="fake-medium")) == ("miss", "medium")
    assert served(ask(gateway, question, model="fake-medium")) == ("exact", "medium")
    narrow = managed_key(gateway, allowed_models=["fake-small"])
    with pytest.raises(openai.PermissionDeniedError):
        ask(gateway, question, key=narrow, model="fake-medium")


def test_max_tier_is_honoured_by_hits_after_a_policy_reload(
    gateway: RunningGateway, policy: Policy
) -> None:
    question = "Who wrote the play Romeo and Juliet?"
    assert served(ask(gateway, question, tier="large")) == ("miss", "large")
    assert served(ask(gateway, question)) == ("exact", "large")
    policy.raw["tenants"]["acme"]["max_tier"] = "medium"
    try:
        reload(gateway)
        cache, tier = served(ask(gateway, question))
        assert tier != "large" and cache == "miss"
    finally:
        del policy.raw["tenants"]["acme"]["max_tier"]
        reload(gateway)


def reload(gateway: RunningGateway) -> None:
    answer = httpx.post(
        gateway.base_url + "/admin/api/policies/reload",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert answer.status_code == 200, answer.text
