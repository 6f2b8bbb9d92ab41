"""A fleet under fault, for tests/gateway/core/test_faults_replicas.py.

``Fleet``: its own Redis (never the shared one), real gateway replicas (``python -m
gateway serve``) sharing it, and optionally an upstream process standing in for a remote
engine; each part can be SIGKILLed and started again on the same port. ``verdict`` reads
the budget counters, holds and ledger straight from Redis once the faults are over (the
load that meets them: ``tests/gateway/fault_load.py``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from policies.schema import GatewayConfig
from policies.stores.budget import GLOBAL_SCOPE, Scope, tenant_scope
from policies.stores.ledger import SpendEvent
from policies.stores.ledger_redis import RedisLedger
from policies.stores.spending import tenant_scopes
from policies.stores.store_redis import RedisStore
from tests.gateway.budget_support import ADMIN_KEY, BudgetProbe, new_prefix
from tests.gateway.fault_load import KEYS, TENANTS, Answer
from tests.redis_servers import RedisProcess
from tests.support import PYTHON
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import GatewayProcess, subprocess_env
from tiergate_testing.net import free_port, wait_http

# policies/stores/settle_journal.py's log line for a settle the store refused
DEFERRED = re.compile(
    r"journal: (?:settle|charge) of (?P<id>\S+) \((?P<usd>[0-9.]+) USD\) deferred"
)


def fleet_config(
    *, ttl_s: float, capped_usd: float, token_delay_s: float, upstream: str | None = None
) -> dict[str, Any]:
    """Three tiers on the fake engine (or ``small`` on the ``openai`` backend in front of
    ``upstream``), short hold TTLs and write timeouts, the three tenants of ``TENANTS``."""
    raw = fake_config(tokens=8, token_delay_s=token_delay_s, max_running=2000)
    if upstream is not None:
        raw["engines"]["up-small"] = {
            "backend": "openai",
            "model": "up-small",
            "options": {"api_base": upstream, "upstream_model": "bench-stream",
                        "api_key": "unused", "connect_timeout_s": 1.0, "timeout_s": 10.0},
        }  # fmt: skip
        raw["tiers"]["small"] = {"engines": ["up-small"]}
        raw["prices"]["up-small"] = {"input": 0.1, "output": 0.2}
    # medium: a fast, long answer, for the readers that stop reading
    raw["engines"]["fake-medium"]["options"] = {"tokens": 60_000, "max_running": 2000}
    # Output tokens only: a request's worst case is what it costs (8 tokens of max_tokens 8),
    # so the capped budget buys an exact number of answers and any overrun shows.
    raw["prices"]["fake-small"] = {"input": 0.0, "output": 0.2}
    raw["admin"] = {"key_from_env": "TIERGATE_ADMIN_KEY"}
    raw["redis_timeout_s"] = 1.0  # under the faults' 2-3 s, above a loaded machine's stalls
    raw["server"] = {"write_timeout_s": 1.0}
    raw["budgets"] = {
        "reservation_ttl_s": ttl_s,
        "journal_replay_s": 0.3,
        "max_output_tokens": {"fake-medium": 100_000},
    }
    raw["tenants"] = {
        name: {"keys": [{"id": f"{name}-1", "from_env": f"TIERGATE_KEY_{name.upper()}"}]}
        for name in TENANTS
    }
    raw["tenants"]["capped"]["budget"] = {"limit_usd": capped_usd}
    raw["tenants"]["roomy"]["budget"] = {"limit_usd": 1.0}
    # never reached, but read and written on every request (fails closed like the budget)
    raw["tenants"]["roomy"]["rate_limit"] = {
        "requests_per_minute": 100_000,
        "tokens_per_minute": 10_000_000,
    }
    raw["tenants"]["open"]["budget_fail_open"] = True
    return raw


@dataclass
class Process:
    """The upstream, a loopback server we own by its command line; ``kill`` is SIGKILL."""

    command: list[str]
    ready_url: str
    log: Path
    env: dict[str, str] = field(default_factory=subprocess_env)
    proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def start(self) -> None:
        self.launch()
        wait_http(self.ready_url, timeout_s=60)

    def kill(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


class Fleet:
    """``replicas`` gateways on one Redis of their own; ``start`` starts them all at once."""

    def __init__(self, tmp: Path, raw: dict[str, Any], replicas: int = 2) -> None:
        self.tmp = tmp
        self.redis = RedisProcess("--maxmemory-policy", "noeviction")
        self.prefix = new_prefix()
        self.journal = tmp / "journal"
        raw = {**raw, "redis_url": self.redis.url, "redis_prefix": self.prefix}
        raw["budgets"] = {**raw["budgets"], "journal_dir": str(self.journal)}
        self.config = GatewayConfig.model_validate(raw)
        env = subprocess_env(
            TIERGATE_ADMIN_KEY=ADMIN_KEY,
            TIERGATE_LOG_LEVEL="warning",
            **{f"TIERGATE_KEY_{n.upper()}": k for n, k in KEYS.items()},
        )
        self.replicas = [
            GatewayProcess(raw, tmp, name=f"replica-{i}", env=env) for i in range(replicas)
        ]
        self.probe = BudgetProbe(self.prefix, self.redis.url)

    @property
    def urls(self) -> list[str]:
        return [r.base_url for r in self.replicas]

    def start(self) -> None:
        self.redis.start()
        for replica in self.replicas:
            replica.spawn()
        for replica in self.replicas:
            replica.wait_ready(timeout_s=60)

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()
        self.redis.stop()

    def journaled(self) -> dict[str, float]:
        """Every settle or charge a replica deferred to its journal (request id -> USD),
        as the replicas logged them."""
        found: dict[str, float] = {}
        for replica in self.replicas:
            for match in DEFERRED.finditer(replica.log_text()):
                found[match["id"]] = float(match["usd"])
        return found

    def journal_waiting(self) -> int:
        """Journal files on disk: a replica deletes its own once nothing in it waits."""
        return sum(1 for _ in self.journal.rglob("settle-*.jsonl"))


def upstream_process(tmp: Path) -> Process:
    """The fake upstream (its ``bench-stream`` model: 32 chunks 10 ms apart) on a port
    that stays the same across a kill and a start."""
    port = free_port()
    command = [PYTHON, "-m", "tiergate_testing.upstream", "--port", str(port)]
    return Process(command, f"http://127.0.0.1:{port}/v1", tmp / f"upstream-{port}.log")


# ---- the four checks ----------------------------------------------------------------


@dataclass
class Verdict:
    spent: dict[str, float]  # per tenant scope, settled
    limits: dict[str, float | None]
    ledger: dict[str, float]  # per tenant: the request events' cost
    daily: dict[str, float]  # per tenant: today's aggregate cost
    global_spent: float
    holds: int
    held_usd: float
    unrecorded: list[str]  # ids answered 200 that the ledger lacks
    journal_files: int
    events: list[SpendEvent]

    def ledger_gap(self) -> float:
        """The largest difference between a tenant's counter, its events and its day."""
        gaps = [abs(self.spent[t] - self.ledger[t]) for t in TENANTS]
        gaps += [abs(self.spent[t] - self.daily[t]) for t in TENANTS]
        return max([*gaps, abs(self.global_spent - sum(self.spent.values()))])


def wait_until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def verdict(fleet: Fleet, answers: list[Answer], *, since: float = 0.0) -> Verdict:
    """After the journal drained and one hold TTL passed: what Redis holds. ``since``:
    only 200s that ended after it must be in the ledger (a restarted Redis lost the rest)."""
    wait_until(lambda: fleet.journal_waiting() == 0, 30)
    time.sleep(fleet.config.budgets.reservation_ttl_s + 0.5)
    config = fleet.config
    statuses = {}
    for tenant in TENANTS:
        statuses.update(fleet.probe.status(tenant_scopes(config, tenant)))
    events = [e for e in fleet.probe.events() if e.kind == "request"]
    ids = {e.request_id for e in events}
    rows = {tenant_scope(t): statuses[tenant_scope(t)] for t in TENANTS}
    today = datetime.now(UTC).date()
    daily = asyncio.run(_daily(fleet, today))
    return Verdict(
        spent={t: rows[tenant_scope(t)].spent_usd for t in TENANTS},
        limits={t: _limit(config, t) for t in TENANTS},
        ledger={t: sum(e.cost_usd for e in events if e.tenant == t) for t in TENANTS},
        daily=daily,
        global_spent=_global_spent(fleet),
        holds=fleet.probe.holds(),
        held_usd=sum(s.held_usd for s in statuses.values()),
        unrecorded=[a.request_id or "?" for a in answers
                    if a.kind == "ok" and a.ended >= since and a.request_id not in ids],
        journal_files=fleet.journal_waiting(),
        events=events,
    )  # fmt: skip


def _limit(config: GatewayConfig, tenant: str) -> float | None:
    budget = config.tenants[tenant].budget
    return None if budget is None else budget.limit_usd


async def _daily(fleet: Fleet, today: date) -> dict[str, float]:
    store = RedisStore(fleet.redis.url, root=fleet.prefix, timeout_s=5.0)
    try:
        days = await RedisLedger(store).daily(list(TENANTS), today, today)
    finally:
        await store.aclose()
    found = {d.tenant: d.get("cost_usd") for d in days}
    return {t: found.get(t, 0.0) for t in TENANTS}


def _global_spent(fleet: Fleet) -> float:
    (row,) = fleet.probe.status([Scope(GLOBAL_SCOPE, None)]).values()
    return row.spent_usd
