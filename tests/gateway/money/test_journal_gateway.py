"""Through the gateway: a settle Redis refuses (maxmemory, noeviction) after the answer was
generated is journaled, the client still gets its 200, and the spend reaches the counters
and the ledger once Redis takes writes again; a fail-open tenant's spend is charged too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import openai
import pytest
import redis

from policies.schema import BudgetSpec
from policies.stores.budget import GLOBAL_SCOPE, Scope, tenant_scope
from tests.redis_servers import RedisProcess
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    process = RedisProcess("--maxmemory-policy", "noeviction")
    process.start()
    yield process
    process.stop()


def wait_for(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def spent(
    gateway: RunningGateway, tenant: str, cap: BudgetSpec | None = None
) -> tuple[float, float]:
    scopes = [Scope(GLOBAL_SCOPE, None), Scope(tenant_scope(tenant), cap)]
    status = gateway.call(gateway.state.parts.money.budgets.status(scopes))
    (row,) = [s for s in status if s.scope == tenant_scope(tenant)]
    return row.spent_usd, row.held_usd


def test_refused_settles_and_fail_open_spend_reach_the_counters(server: RedisProcess) -> None:
    config = fake_config(tokens=6, token_delay_s=0.05)
    config["redis_url"] = server.url
    config["budgets"] = {"journal_replay_s": 0.2}
    config["tenants"]["acme"]["budget"] = {"limit_usd": 1.0}
    config["tenants"]["globex"]["budget_fail_open"] = True
    admin = redis.Redis(port=server.port)
    messages: Any = [{"role": "user", "content": "hello there"}]
    with running_gateway(config) as gateway:
        state = gateway.state
        acme = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
        stream = acme.chat.completions.create(model="small", messages=messages, stream=True)
        text = ""
        for i, chunk in enumerate(stream):
            if i == 0:  # reserved and running: now Redis refuses every write
                admin.config_set("maxmemory", "1")
            text += "".join(c.delta.content or "" for c in chunk.choices)
        assert text  # the whole answer, with [DONE]: the settle failure never reached it
        wait_for(lambda: state.parts.money.journal.pending == 1)
        globex = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=OTHER_KEY, max_retries=0)
        answer = globex.chat.completions.create(model="small", messages=messages)
        assert answer.choices[0].message.content  # served: the tenant fails open
        wait_for(lambda: state.parts.money.journal.pending == 2)
        waiting = state.parts.money.journal.pending_usd
        assert waiting > 0
        time.sleep(0.5)  # replays keep failing while Redis is full; nothing is dropped
        assert state.parts.money.journal.pending == 2
        admin.config_set("maxmemory", "0")
        wait_for(lambda: state.parts.money.journal.pending == 0)
        acme_spent, acme_held = spent(gateway, "acme", BudgetSpec(limit_usd=1.0))
        globex_spent, _ = spent(gateway, "globex")
        assert acme_held == 0.0 and acme_spent > 0 and globex_spent > 0
        assert acme_spent + globex_spent == pytest.approx(waiting)
        today = datetime.now(UTC).date()
        days = gateway.call(state.parts.money.ledger.daily(["acme", "globex"], today, today))
        assert {d.tenant: d.get("requests") for d in days} == {"acme": 1.0, "globex": 1.0}
        assert gateway.call(state.parts.money.budgets.active_holds()) == 0
        acme.close()
        globex.close()
    admin.close()
