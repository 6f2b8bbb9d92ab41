"""Image parts on an ``openai``-backend tier, through two real gateways on one Redis budget
and the official client, against an upstream that bills images as a provider does:
what is settled never passes the budget, a tier that cannot price images refuses them
before anything is dispatched or held, and an answer without usage is charged the
reservation's worst case."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import openai
import pytest

from gateway.chat.protocol import ChatCompletionRequest, to_generation
from gateway.money.spend import prompt_upper_tokens
from policies.schema import GatewayConfig
from policies.stores.spending import tenant_scopes
from tests.gateway.budget_support import BudgetProbe, budget_config, redis_prefix
from tiergate_testing.gateways import RunningGateway, concurrent_chats, running_gateway
from tiergate_testing.upstream import (
    GREETING,
    IMAGE_TOKENS,
    PROVIDER_MODELS,
    UpstreamStats,
    running_upstream,
)

PRICE = 10.0  # USD per million tokens, input and output alike
WORDS = 6  # what the upstream answers (max_tokens 6)
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
CONTENT = [{"type": "text", "text": "What is in this picture?"}, IMAGE]
# What the upstream bills one request: 7 text tokens, the image, the answer.
BILLED_USD = (7 + IMAGE_TOKENS["high"] + WORDS) * PRICE / 1e6
LIMIT_USD = 5 * BILLED_USD


def gateway_config(prefix: str, base_url: str) -> dict[str, Any]:
    raw = budget_config(prefix)

    def engine(model: str) -> dict[str, Any]:
        return {
            "backend": "openai",
            "model": model,
            "modalities": ["text", "image"],
            "options": {"api_base": base_url},
        }

    raw["engines"] = {"vision": engine("up-vision"), "bare": engine("up-bare")}
    raw["engines"]["silent"] = engine("no-usage")
    raw["tiers"] = {name: {"engines": [name]} for name in raw["engines"]}
    raw["prices"] = {
        spec["model"]: {"input": PRICE, "output": PRICE} for spec in raw["engines"].values()
    }
    rule: dict[str, Any] = {"image": {}}  # OpenAI's tile rule, GPT-4o's numbers
    raw["budgets"] = {"part_tokens": {"up-vision": rule, "no-usage": rule}}
    raw["routing"] = {"default_tier": "vision"}
    del raw["tenants"]["globex"]
    raw["tenants"]["acme"]["default_tier"] = "vision"
    raw["tenants"]["acme"]["budget"] = {"limit_usd": LIMIT_USD, "window": "total"}
    return raw


@pytest.fixture
def fleet() -> Iterator[tuple[RunningGateway, RunningGateway, UpstreamStats, BudgetProbe]]:
    paced = replace(GREETING, gap_s=0.05)
    with redis_prefix() as prefix, running_upstream(PROVIDER_MODELS, default=paced) as up:
        raw = gateway_config(prefix, up.base_url)
        with running_gateway(raw) as one, running_gateway(raw) as two:
            yield one, two, up.stats, BudgetProbe(prefix)


def _ask(gateways: list[RunningGateway], model: str, n: int) -> list[Any]:
    urls = [g.base_url for g in gateways]
    messages = [{"role": "user", "content": CONTENT}]
    return asyncio.run(concurrent_chats(urls, n, model=model, messages=messages, max_tokens=WORDS))


def test_concurrent_image_requests_never_settle_past_the_budget(fleet: Any) -> None:
    one, two, log, probe = fleet
    replies = _ask([one, two], "vision", 30)
    assert probe.wait_no_holds() == 0
    scopes = tenant_scopes(one.state.config, "acme")
    spent = probe.status(scopes)["tenant:acme"].spent_usd
    events = [e for e in probe.events() if e.kind != "denied"]
    served = [r for r in replies if not isinstance(r, openai.APIStatusError)]
    refused = [r for r in replies if isinstance(r, openai.APIStatusError)]
    assert served and refused
    assert all(r.status_code == 429 and r.code == "insufficient_quota" for r in refused)
    # The upstream billed each answer its image; the gateway charged exactly that.
    assert all(r.usage.prompt_tokens == 7 + IMAGE_TOKENS["high"] for r in served)
    assert len(log.bodies) == len(served) == len(events)
    assert spent == pytest.approx(len(served) * BILLED_USD)
    assert spent == pytest.approx(sum(e.cost_usd for e in events))
    assert spent <= LIMIT_USD + 1e-12


def test_a_tier_that_cannot_price_images_refuses_them_untouched(fleet: Any) -> None:
    one, _, log, probe = fleet
    (reply,) = _ask([one], "bare", 1)
    assert isinstance(reply, openai.BadRequestError)
    assert reply.code == "unsupported_content"
    assert reply.param == "messages[0].content[1]"
    assert "budgets.part_tokens" in reply.message
    assert log.bodies == []
    assert probe.holds() == 0
    assert [e for e in probe.events() if e.kind != "denied"] == []


def test_an_answer_without_usage_is_charged_the_reserved_worst_case(fleet: Any) -> None:
    one, _, log, probe = fleet
    (reply,) = _ask([one], "silent", 1)
    assert not isinstance(reply, openai.APIStatusError), reply
    config: GatewayConfig = one.state.config
    body = {"model": "silent", "messages": [{"role": "user", "content": CONTENT}]}
    generation = to_generation(ChatCompletionRequest.model_validate({**body, "max_tokens": 6}))
    worst_prompt = prompt_upper_tokens(config, generation, "silent")
    # The text by bytes, and the URL's image at its most tiles (85 + 170 * 8), not its bytes.
    assert worst_prompt >= 85 + 170 * 8
    assert worst_prompt < 85 + 170 * 8 + 150
    (event,) = [e for e in probe.events() if e.kind != "denied"]
    assert event.prompt_tokens == worst_prompt
    assert len(log.bodies) == 1
