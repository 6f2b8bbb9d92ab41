"""One lifecycle per request, through real gateways and the official client: the config
snapshot survives a reload mid-flight, the engine never runs past what the reservation
paid for, and the tier trail shows every move."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis
import yaml
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.chat.protocol import ChatCompletionRequest, to_generation
from gateway.money.spend import prompt_upper_tokens
from policies.loader import load_config
from policies.stores.spending import tenant_scopes
from policies.stores.store import key_prefix
from tests.gateway.budget_support import REDIS_URL, BudgetProbe, budget_config, redis_prefix
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, concurrent_chats, running_gateway
from tiergate_testing.upstream import Profile, Upstream

ADMIN_KEY = "tg-admin-key-for-lifecycle-tests"
OLD_PRICES = {"fake-small": (0.1, 0.2), "fake-medium": (1.0, 2.0)}
NEW_PRICES = {"fake-small": (0.3, 0.6), "fake-medium": (3.0, 6.0)}
MESSAGES = [{"role": "user", "content": "one two three"}]


def reload_config(default_tier: str, prices: dict[str, tuple[float, float]]) -> dict[str, Any]:
    config = fake_config(tokens=8, token_delay_s=0.25, max_inflight=200, max_running=200)
    config["admin"] = {"key_from_env": "TIERGATE_LIFECYCLE_ADMIN_KEY"}
    config["tenants"]["acme"]["default_tier"] = default_tier
    for model, (inp, out) in prices.items():
        config["prices"][model] = {"input": inp, "output": out}
    return config


def cost(prices: dict[str, tuple[float, float]], model: str, prompt: int, out: int) -> float:
    inp, outp = prices[model]
    return (prompt * inp + out * outp) / 1e6


def inflight(gateway: RunningGateway, engine: str) -> int:
    return sum(r.inflight for r in gateway.state.parts.replicas[engine])


async def _burst(gateway: RunningGateway, path: Path) -> tuple[list[Any], list[Any]]:
    client = openai.AsyncOpenAI(
        base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0, timeout=60
    )

    async def one() -> Any:
        return await client.chat.completions.with_raw_response.create(
            model="auto",
            messages=MESSAGES,  # type: ignore[arg-type]
        )

    before = [asyncio.ensure_future(one()) for _ in range(50)]
    deadline = time.monotonic() + 30
    while inflight(gateway, "fake-small") < 50:  # every one of them is generating
        assert time.monotonic() < deadline, "the 50 requests never were in flight together"
        await asyncio.sleep(0.01)
    await asyncio.to_thread(path.write_text, yaml.safe_dump(reload_config("medium", NEW_PRICES)))
    done = await asyncio.to_thread(
        httpx.post,
        gateway.base_url + "/admin/api/policies/reload",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert done.status_code == 200, done.text
    assert inflight(gateway, "fake-small") > 0  # the reload landed while they ran
    after = [asyncio.ensure_future(one()) for _ in range(10)]
    try:
        return list(await asyncio.gather(*before)), list(await asyncio.gather(*after))
    finally:
        await client.close()


def test_a_reload_mid_flight_leaves_each_request_on_one_policy(tmp_path: Path) -> None:
    os.environ["TIERGATE_LIFECYCLE_ADMIN_KEY"] = ADMIN_KEY
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(reload_config("small", OLD_PRICES)))
    with running_gateway(load_config(path), lambda: load_config(path)) as gateway:
        before, after = asyncio.run(_burst(gateway, path))
        events = {
            e.request_id: e
            for e in gateway.call(
                gateway.state.parts.money.ledger.events(time.time() - 600, time.time() + 60)
            )
        }
    for replies, tier, prices in ((before, "small", OLD_PRICES), (after, "medium", NEW_PRICES)):
        for raw in replies:
            reply = raw.parse()
            assert reply.usage is not None
            model = f"fake-{tier}"
            want = cost(prices, model, reply.usage.prompt_tokens, reply.usage.completion_tokens)
            # Tier (decided at routing) and price (applied at settlement) from one policy.
            assert raw.headers["x-tiergate-tier"] == tier
            assert float(raw.headers["x-tiergate-cost-usd"]) == pytest.approx(want, abs=1e-8)
            event = events[raw.headers["x-request-id"]]
            assert (event.tier, event.model, event.status) == (tier, model, "ok")
            assert event.cost_usd == pytest.approx(want)


def test_the_engine_never_runs_past_the_reserved_cap_across_replicas() -> None:
    """Two gateways on one Redis budget; clients ask for 200 tokens on a model capped at
    8 by ``budgets.max_output_tokens``; the engine would happily write 200."""
    with redis_prefix() as prefix:
        raw = budget_config(prefix, tokens=200, max_inflight=200, max_running=200)
        raw["prices"]["fake-small"] = {"input": 0.0, "output": 0.2}
        per_request = 8 * 0.2 / 1e6
        limit = 10 * per_request
        raw["budgets"] = {"max_output_tokens": {"fake-small": 8}}
        raw["tenants"]["acme"]["budget"] = {"limit_usd": limit, "window": "total"}
        with running_gateway(raw) as one, running_gateway(raw) as two:
            urls = [one.base_url, two.base_url]
            replies = asyncio.run(
                concurrent_chats(urls, 40, model="small", messages=MESSAGES, max_tokens=200)
            )
            scopes = tenant_scopes(one.state.config, "acme")
        probe = BudgetProbe(prefix)
        assert probe.wait_no_holds() == 0
        spent = probe.status(scopes)["tenant:acme"].spent_usd
        events = [e for e in probe.events() if e.kind != "denied"]
    served = [r for r in replies if not isinstance(r, openai.APIStatusError)]
    refused = [r for r in replies if isinstance(r, openai.APIStatusError)]
    assert served and refused
    assert all(r.status_code == 429 for r in refused)
    assert all(r.usage is not None and r.usage.completion_tokens <= 8 for r in served), [
        r.usage for r in served
    ]
    assert len(events) == len(served)
    assert spent == pytest.approx(sum(e.cost_usd for e in events))
    assert spent <= limit + 1e-12


def test_a_settle_that_fails_never_fails_the_answer(caplog: pytest.LogCaptureFixture) -> None:
    """The store answers the settle with an error (a key of the wrong type): the client
    still gets its whole answer, and the failure is logged."""
    with redis_prefix() as prefix:
        client = redis.Redis.from_url(REDIS_URL)
        client.set(f"{key_prefix(prefix, 'budget', tag='ledger')}:settled", "not a sorted set")
        client.close()
        with running_gateway(budget_config(prefix, tokens=5)) as gateway:
            api = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
            whole = api.chat.completions.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
            assert whole.usage is not None and whole.usage.completion_tokens == 5
            stream = api.chat.completions.create(
                model="small",
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
            )
            assert sum(1 for c in stream if c.choices and c.choices[0].delta.content) == 5
    # Logged as an error: by the store's own mapping, or as the last resort in ``close``.
    failed = [r for r in caplog.records if "settl" in r.getMessage() and r.levelno >= logging.ERROR]
    assert len(failed) == 2


async def test_an_upstream_without_usage_is_billed_no_less_than_reserved() -> None:
    """CJK text from a provider that reports no usage: the prompt is billed as the
    reservation counted it, the completion by the same bytes-per-token rule (two CJK
    characters are 6 bytes: 6 tokens, where 4 characters a token said 1)."""
    profiles = {"up-cjk": Profile(chunks=5, word="漢字", usage=False)}
    async with Upstream(profiles) as upstream:
        config = {
            "engines": {
                "up-cjk": {
                    "backend": "openai",
                    "model": "up-cjk",
                    "options": {"api_base": upstream.base_url},
                }
            },
            "tiers": {"small": {"engines": ["up-cjk"]}},
            "prices": {"up-cjk": {"input": 1.0, "output": 2.0}},
            "tenants": {"acme": {"keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}]}},
        }
        with running_gateway(config) as gateway:
            body = ChatCompletionRequest.model_validate({"model": "small", "messages": MESSAGES})
            prompt_upper = prompt_upper_tokens(gateway.state.config, to_generation(body))
            api = openai.AsyncOpenAI(
                base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0
            )
            whole = await api.chat.completions.with_raw_response.create(
                model="small",
                messages=MESSAGES,  # type: ignore[arg-type]
            )
            stream = await api.chat.completions.create(
                model="small",
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            streamed = [c.usage async for c in stream if c.usage is not None]
            await api.close()
            now = time.time()
            events = gateway.call(gateway.state.parts.money.ledger.events(now - 600, now + 60))
    completion = 5 * len("漢字".encode())
    want = (prompt_upper * 1.0 + completion * 2.0) / 1e6
    usage = whole.parse().usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt_upper, completion)
    assert float(whole.headers["x-tiergate-cost-usd"]) == pytest.approx(want, abs=1e-8)
    assert [(u.prompt_tokens, u.completion_tokens) for u in streamed] == [
        (prompt_upper, completion)
    ]
    assert [(e.prompt_tokens, e.completion_tokens) for e in events] == [
        (prompt_upper, completion)
    ] * 2
    assert all(e.cost_usd == pytest.approx(want) for e in events)


def test_the_tier_trail_shows_a_failover_and_a_downgrade_in_the_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = fake_config(tokens=4)
    config["engines"]["fake-large"]["options"] = {"dead": True}
    config["tenants"]["globex"]["budget"] = {"limit_usd": 1e-4}
    config["tenants"]["globex"]["on_budget_exceeded"] = "downgrade"
    hi = [{"role": "user", "content": "hi"}]
    with running_gateway(config, tracer_provider=provider) as gateway:
        trails = {}
        for key, name in ((TEST_KEY, "failover"), (OTHER_KEY, "downgrade")):
            api = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
            raw = api.chat.completions.with_raw_response.create(
                model="large",
                messages=hi,  # type: ignore[arg-type]
                max_tokens=4,
            )
            assert raw.headers["x-tiergate-tier"] == "medium"
            trails[name] = raw.headers
        deadline = time.monotonic() + 5
        while (
            len(generations := [s for s in exporter.get_finished_spans() if s.name == "generation"])
            < 2
        ):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert trails["failover"]["x-tiergate-failover"] == "large->medium"
    assert trails["downgrade"]["x-tiergate-downgraded"] == "large->medium"
    seen = [tuple(s.attributes["tiergate.tier_trail"]) for s in generations if s.attributes]
    failover, downgrade = seen
    assert failover[0] == "tier large requested by name"
    assert failover[1].startswith("failover: large -> medium")
    assert downgrade == ("tier large requested by name", "budget: downgraded large -> medium")
