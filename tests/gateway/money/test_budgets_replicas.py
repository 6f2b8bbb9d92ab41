"""Several real gateway processes sharing one Redis: budgets hold across replicas.

Each replica is ``python -m gateway serve`` on its own loopback port, with a slow fake
engine, so many requests are in flight at once on every replica.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.chat.protocol import ChatCompletionRequest, to_generation
from gateway.money.spend import worst_cases
from policies.schema import GatewayConfig
from policies.stores.ledger import day_of
from policies.stores.spending import tenant_scopes
from tests.gateway.budget_support import ADMIN_KEY, BudgetProbe, budget_config, redis_prefix
from tests.support import PYTHON
from tiergate_testing.gateways import GatewayProcess, subprocess_env

pytestmark = pytest.mark.slow

HI = [{"role": "user", "content": "hi"}]
KEYS = {name: f"tg-{name}-key-0123456789" for name in ("spender", "paced", "victim")}
SMALL_COST = 8 * 0.2 / 1e6  # the fake answers 8 tokens; input is free in these tests
ENGINE = {"tokens": 8, "max_running": 2000, "max_inflight": 2000}


Replica = GatewayProcess  # one ``python -m gateway serve`` of the fleet


def small_worst_case(config: GatewayConfig) -> float:
    body = ChatCompletionRequest(model="small", messages=HI, max_tokens=8)  # type: ignore[arg-type]
    return worst_cases(config, ["small"], to_generation(body), None)[0].usd


def configure(prefix: str, ttl_s: float, token_delay_s: float) -> tuple[dict[str, Any], float]:
    raw = budget_config(prefix, token_delay_s=token_delay_s, **ENGINE)
    raw["budgets"] = {"reservation_ttl_s": ttl_s}
    # Four replicas and the load generator share two CPU cores here: a burst of 125
    # requests per replica starves each event loop for longer than the 0.5 s default.
    raw["redis_timeout_s"] = 5.0
    raw["redis_max_connections"] = 128
    # Output tokens only, so a request's worst case (max_tokens=8) is exactly what the
    # fake charges: the budget then buys exactly 50 requests, however they interleave.
    raw["prices"]["fake-small"] = {"input": 0.0, "output": 0.2}
    worst = small_worst_case(GatewayConfig.model_validate(raw))
    assert worst == pytest.approx(SMALL_COST)
    raw["tenants"] = {
        name: {"keys": [{"id": f"{name}-1", "from_env": f"TIERGATE_KEY_{name.upper()}"}]}
        for name in KEYS
    }
    raw["tenants"]["spender"]["budget"] = {"limit_usd": 50 * SMALL_COST}
    raw["tenants"]["victim"]["budget"] = {"limit_usd": 100 * worst}
    raw["tenants"]["paced"]["rate_limit"] = {"requests_per_minute": 60}
    return raw, worst


@contextmanager
def replicas(raw: dict[str, Any], count: int, tmp: Path) -> Iterator[list[Replica]]:
    env = subprocess_env(
        TIERGATE_ADMIN_KEY=ADMIN_KEY,
        TIERGATE_LOG_LEVEL="warning",
        **{f"TIERGATE_KEY_{n.upper()}": k for n, k in KEYS.items()},
    )
    started = [
        GatewayProcess(raw, tmp, name=f"replica-{raw['redis_prefix']}-{i}", env=env)
        for i in range(count)
    ]
    try:
        for replica in started:
            replica.spawn()
        for replica in started:
            replica.wait_ready(timeout_s=60)
        yield started
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Replica], Any]]:
    with redis_prefix() as prefix:
        raw, worst = configure(prefix, ttl_s=60, token_delay_s=0.02)
        with replicas(raw, 4, tmp_path_factory.mktemp("fleet")) as running:
            yield running, (GatewayConfig.model_validate(raw), worst, BudgetProbe(prefix))


async def _fire(urls: list[str], key: str, count: int) -> list[str]:
    """``count`` concurrent requests spread round-robin; each result is "ok" or the error code."""
    clients = [
        openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=120)
        for url in urls
    ]

    async def one(i: int) -> str:
        try:
            await clients[i % len(clients)].chat.completions.create(
                model="small",
                messages=HI,  # type: ignore[arg-type]
                max_tokens=8,
            )
        except openai.APIStatusError as exc:
            return f"{exc.status_code}:{exc.code}"
        return "ok"

    try:
        return await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        for client in clients:
            await client.close()


def test_500_concurrent_requests_on_4_replicas_never_overspend(fleet: Any) -> None:
    running, (config, _, probe) = fleet
    results = asyncio.run(_fire([r.base_url for r in running], KEYS["spender"], 500))
    served = results.count("ok")
    refused = [r for r in results if r != "ok"]
    assert set(refused) <= {"429:insufficient_quota"}, sorted(set(refused))
    assert served == 50
    assert probe.wait_no_holds() == 0
    status = probe.status(tenant_scopes(config, "spender"))["tenant:spender"]
    assert status.held_usd == 0.0
    assert status.spent_usd <= 50 * SMALL_COST + 1e-12
    assert status.spent_usd == pytest.approx(50 * SMALL_COST)
    events = [e for e in probe.events() if e.tenant == "spender"]
    requests = [e for e in events if e.kind == "request"]
    assert len(requests) == served
    assert sum(1 for e in events if e.kind == "denied" and e.status == "budget") == len(refused)
    assert sum(e.cost_usd for e in requests) == pytest.approx(status.spent_usd, abs=1e-9 * served)
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    spend = httpx.get(
        running[1].base_url + "/admin/api/budgets/spend",
        params={"tenant": "spender"},
        headers=admin,
    ).json()
    (day,) = [d for d in spend["days"] if d["day"] == day_of(time.time())]
    assert day["cost_usd"] == pytest.approx(status.spent_usd, abs=1e-9 * served)
    assert day["requests"] == served and day["denied_budget"] == len(refused)
    print(f"\n500 requests on 4 replicas: {served} served, {len(refused)} refused, "
          f"spent ${status.spent_usd:.9f} of ${50 * SMALL_COST:.9f}")  # fmt: skip


async def _pace(urls: list[str], key: str, seconds: float, every_s: float) -> list[float]:
    """A request every ``every_s`` for ``seconds``; the send times of those admitted."""
    admitted: list[float] = []
    headers = {"authorization": f"Bearer {key}"}
    body = {"model": "small", "messages": HI, "max_tokens": 1}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:

        async def one(url: str, sent: float) -> None:
            reply = await http.post(url + "/v1/chat/completions", json=body)
            if reply.status_code == 200:
                admitted.append(sent)
            else:
                assert reply.status_code == 429, reply.text
                assert reply.json()["error"]["code"] == "rate_limit_exceeded"

        tasks = []
        start = time.monotonic()
        i = 0
        while (now := time.monotonic()) - start < seconds:
            tasks.append(asyncio.ensure_future(one(urls[i % len(urls)], now - start)))
            i += 1
            await asyncio.sleep(max(start + i * every_s - time.monotonic(), 0))
        await asyncio.gather(*tasks)
    return sorted(admitted)


def test_60_rpm_across_replicas_is_exact_to_one_request(fleet: Any) -> None:
    running, _ = fleet
    admitted = asyncio.run(_pace([r.base_url for r in running], KEYS["paced"], 66.0, 0.2))
    first = admitted[0]
    in_first_minute = sum(1 for t in admitted if first <= t < first + 60)
    assert 59 <= in_first_minute <= 61, in_first_minute
    worst_window = max(sum(1 for t in admitted if s <= t < s + 60) for s in admitted)
    assert worst_window <= 61, worst_window
    assert len(admitted) > in_first_minute  # the window slides: more pass after a minute
    print(f"\n60 RPM: {in_first_minute} in the first minute, busiest minute {worst_window}")


async def _hold_streams(url: str, key: str, count: int) -> None:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)

    async def one() -> None:
        stream = await client.chat.completions.create(
            model="small",
            messages=HI,  # type: ignore[arg-type]
            max_tokens=8,
            stream=True,
        )
        async for _ in stream:
            pass

    try:
        await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
    finally:
        await client.close()


def test_a_killed_replicas_holds_lapse_and_the_budget_returns(tmp_path: Path) -> None:
    """The holds of a SIGKILLed replica lapse at their deadline (at most one TTL after the
    kill: nothing extends them any more), and the first budget listing a survivor gives
    once the store's clock has passed that deadline shows the money back. Both are read
    on the store's clock, not the test's: how long a loaded host takes to poll is no part
    of the verdict (the polls' bounds are liveness bounds only)."""
    ttl_s = 3.0
    with redis_prefix() as prefix:
        raw, worst = configure(prefix, ttl_s=ttl_s, token_delay_s=1.0)
        config, probe = GatewayConfig.model_validate(raw), BudgetProbe(prefix)
        scopes = tenant_scopes(config, "victim")
        with replicas(raw, 2, tmp_path) as (victim, survivor):
            runner = subprocess.Popen(
                [PYTHON, "-c", _STREAMER, victim.base_url, KEYS["victim"]],
                env=subprocess_env(),
            )
            try:
                deadline = time.monotonic() + 60  # liveness: ten streams start
                while probe.holds() < 10 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert probe.holds() == 10
                victim.kill()  # returns once the process is gone
                killed = time.monotonic()
                store_now, lapse_at = probe.deadlines()
                assert len(lapse_at) == 10
                assert max(lapse_at) <= store_now + ttl_s, (store_now, lapse_at)
                held = probe.status(scopes)["tenant:victim"]
                assert held.spent_usd == 0.0
                if probe.deadlines()[0] < min(lapse_at):  # read before any could lapse
                    assert held.held_usd == pytest.approx(10 * worst, abs=1e-9)
                while probe.deadlines()[0] <= max(lapse_at):  # the store's clock passes
                    time.sleep(0.1)
                admin = {"authorization": f"Bearer {ADMIN_KEY}"}
                listing = httpx.get(
                    survivor.base_url + "/admin/api/budgets", headers=admin, timeout=30
                ).json()
                restored_after = time.monotonic() - killed
                tenant = next(t for t in listing["tenants"] if t["tenant"] == "victim")
                assert tenant["held_usd"] == 0 and tenant["spent_usd"] == 0
                assert tenant["remaining_usd"] == pytest.approx(100 * worst, abs=1e-9)
                assert probe.holds() == 0
                print(f"\nholds of a SIGKILLed replica released {restored_after:.2f}s after "
                      f"the kill (TTL {ttl_s}s)")  # fmt: skip
            finally:
                runner.kill()
                runner.wait(10)


# Ten slow streams against one replica, from another process (so the kill breaks them
# without disturbing the test's own event loop).
_STREAMER = """
import asyncio, sys
from tests.gateway.money.test_budgets_replicas import _hold_streams
asyncio.run(_hold_streams(sys.argv[1], sys.argv[2], 10))
"""
