"""The settle journal on a real Redis that refuses writes (maxmemory with noeviction) and
then comes back: nothing is lost, nothing is charged twice, a restart replays."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from policies.schema import BudgetSpec
from policies.stores.budget import GLOBAL_SCOPE, Reservation, Scope, tenant_scope
from policies.stores.budget_redis import RedisBudgetStore
from policies.stores.ledger import SpendEvent
from policies.stores.ledger_redis import RedisLedger
from policies.stores.settle_journal import SettleJournal
from policies.stores.store import StoreUnavailable
from policies.stores.store_redis import RedisStore
from tests.redis_servers import RedisProcess, redis8_process, unique_root

SCOPES = [Scope(GLOBAL_SCOPE, None), Scope(tenant_scope("acme"), BudgetSpec(limit_usd=1.0))]


@pytest.fixture(scope="module")
def server() -> Iterator[RedisProcess]:
    with redis8_process() as process:
        yield process


@pytest.fixture
async def budgets(server: RedisProcess) -> AsyncIterator[RedisBudgetStore]:
    store = RedisStore(server.url, root=unique_root())
    yield RedisBudgetStore(RedisLedger(store), ttl_s=60)
    await store.aclose()


class Full:
    """Redis at maxmemory with noeviction: every write (every budget script) is refused."""

    def __init__(self, server: RedisProcess) -> None:
        self.client = redis.Redis(port=server.port)

    def __enter__(self) -> Full:
        self.client.config_set("maxmemory-policy", "noeviction")
        self.client.config_set("maxmemory", "1")
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.config_set("maxmemory", "0")
        self.client.close()


def event(rid: str, cost: float) -> SpendEvent:
    return SpendEvent(
        ts=time.time(), request_id=rid, tenant="acme", key_id="k1", tier="small",
        model="m", cost_usd=cost,
    )  # fmt: skip


async def tenant(budgets: RedisBudgetStore) -> tuple[float, float]:
    (status,) = [s for s in await budgets.status(SCOPES) if s.scope == "tenant:acme"]
    return status.spent_usd, status.held_usd


def files(folder: Path) -> list[Path]:
    return list(folder.iterdir())


def lines(folder: Path) -> list[dict[str, object]]:
    paths = sorted(folder.glob("*.jsonl"))
    return [json.loads(x) for p in paths for x in p.read_text().splitlines()]


async def test_refused_settles_are_journaled_then_replayed_once(
    server: RedisProcess, budgets: RedisBudgetStore, tmp_path: Path
) -> None:
    journal = SettleJournal(budgets, tmp_path)
    assert journal.open() == 0
    held = [await budgets.reserve(f"r{i}", SCOPES, [0.2]) for i in range(3)]
    assert all(isinstance(h, Reservation) for h in held)
    with Full(server):
        with pytest.raises(StoreUnavailable):  # what the request path would have seen
            await budgets.settle(held[0], 0.1)  # type: ignore[arg-type]
        for h in held:
            assert isinstance(h, Reservation)
            await journal.settle(h, 0.1, event(h.request_id, 0.1))
        await journal.charge("open-1", SCOPES, 0.05, event("open-1", 0.05))
        assert journal.pending == 4 and journal.pending_usd == pytest.approx(0.35)
        assert await journal.replay() == 0  # still refused: nothing lost, nothing taken
    assert [line["op"] for line in lines(tmp_path)] == ["settle"] * 3 + ["charge"]
    assert await tenant(budgets) == (0.0, pytest.approx(0.6))  # still held meanwhile
    assert await journal.replay() == 4
    assert await tenant(budgets) == (pytest.approx(0.35), 0.0)
    assert journal.pending == 0 and not files(tmp_path)  # deleted once drained
    assert await journal.replay() == 0
    for h in held:  # a second replay of the same entries charges nothing
        assert isinstance(h, Reservation)
        assert not await budgets.settle(h, 0.1, event(h.request_id, 0.1))
    assert await tenant(budgets) == (pytest.approx(0.35), 0.0)
    today = datetime.now(UTC).date()
    (day,) = await budgets.ledger.daily(["acme"], today, today)
    assert day.get("requests") == 4 and day.get("cost_usd") == pytest.approx(0.35)
    journal.close()


async def test_a_restarted_replica_adopts_its_journal(
    server: RedisProcess, budgets: RedisBudgetStore, tmp_path: Path
) -> None:
    first = SettleJournal(budgets, tmp_path)
    first.open()
    held = await budgets.reserve("r1", SCOPES, [0.4])
    assert isinstance(held, Reservation)
    with Full(server):
        await first.settle(held, 0.3, event("r1", 0.3))
    # A live replica's journal is locked: a neighbour starting now leaves it alone.
    neighbour = SettleJournal(budgets, tmp_path)
    assert neighbour.open() == 0
    neighbour.close()
    first.close()  # the replica dies with the entry unsettled
    restarted = SettleJournal(budgets, tmp_path)
    assert restarted.open() == 1
    assert await restarted.replay() == 1
    assert await tenant(budgets) == (pytest.approx(0.3), 0.0)
    assert lines(tmp_path) == []  # the adopted journal is deleted once empty
    restarted.close()


async def test_a_torn_line_is_skipped(budgets: RedisBudgetStore, tmp_path: Path) -> None:
    good = {"op": "charge", "id": "c1", "cost_usd": 0.01, "event": None,
            "scopes": [["tenant:acme", "1000000000 daily"]]}  # fmt: skip
    (tmp_path / "settle-old-1-0.jsonl").write_text(json.dumps(good) + '\n{"op": "sett')
    journal = SettleJournal(budgets, tmp_path)
    assert journal.open() == 1
    assert await journal.replay() == 1
    assert (await tenant(budgets))[0] == pytest.approx(0.01)
    journal.close()
