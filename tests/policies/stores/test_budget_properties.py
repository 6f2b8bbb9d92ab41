"""Property tests of the budget stores (memory, and Redis on the real server), one contract.

Hypothesis draws caps for several overlapping scopes (the global cap, two tenants, a key
in each) and a random interleaving of: reserve (with downgrade candidates), settle (at
most the reserved amount), a retried settle, a heartbeat, a burst of concurrent reserves,
a replica that dies holding money, the TTL passing, and a partitioned replica that
settles after its hold lapsed. A model predicts every answer; after every step:

* settled spend never passes a cap, nor does spend plus what is held, except by what a
  late settle charged after its hold had lapsed (spend is never lost, and a lapsed hold
  is money the store already gave back; that bound is asserted exactly);
* the store's counters equal the model's to the nano-dollar;

and once every live request settled and the TTL passed: no hold is left, and the
ledger's day aggregates sum to the counters.

The TTL passes on the store's own clock: the memory store's is the test's, moved only
when the TTL is meant to pass, so a dead hold cannot lapse early however slow the host;
Redis keeps its server time, so a step during which a dead hold may have lapsed (its
reserve was sent a TTL ago) cannot be predicted and its example is discarded, never
failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from policies.schema import BudgetSpec
from policies.stores.budget import (
    GLOBAL_SCOPE,
    BudgetStore,
    Denied,
    Reservation,
    Scope,
    key_scope,
    tenant_scope,
)
from policies.stores.budget_memory import MemoryBudgetStore
from policies.stores.budget_redis import RedisBudgetStore
from policies.stores.ledger import Ledger, MemoryLedger, SpendEvent
from policies.stores.ledger_redis import RedisLedger
from tests.redis_servers import REDIS7_URL, redis_store

UNIT = 1e-6  # amounts are whole micro-dollars, so USD floats round-trip exactly
DEAD_TTL_S = 0.15  # a dead replica's holds lapse after this (on Redis: real time, TIME)
LIVE_TTL_S = 600.0
REQUESTERS = (("acme", "k1"), ("acme", "k2"), ("globex", "k1"))


def units(usd: float) -> int:
    return round(usd / UNIT)


# ---- the operations Hypothesis interleaves -------------------------------------------


@dataclass(frozen=True)
class Reserve:
    who: int
    candidates: tuple[int, ...]  # micro-dollars, most capable first
    dies: bool  # reserved by a replica that will die holding it


@dataclass(frozen=True)
class Settle:
    pick: int
    quarters: int  # the real cost: quarters/4 of the reservation


@dataclass(frozen=True)
class Retry:
    pick: int


@dataclass(frozen=True)
class Extend:
    pick: int


@dataclass(frozen=True)
class Burst:
    who: int
    amount: int
    count: int


@dataclass(frozen=True)
class Expire:
    pass


@dataclass(frozen=True)
class LateSettle:
    pick: int
    quarters: int


Op = Reserve | Settle | Retry | Extend | Burst | Expire | LateSettle

amounts = st.integers(1, 400)
ops = st.one_of(
    st.builds(
        Reserve,
        st.integers(0, len(REQUESTERS) - 1),
        st.lists(amounts, min_size=1, max_size=3).map(tuple),
        st.booleans(),
    ),
    st.builds(Settle, st.integers(0, 50), st.integers(0, 4)),
    st.builds(Retry, st.integers(0, 50)),
    st.builds(Extend, st.integers(0, 50)),
    st.builds(Burst, st.integers(0, len(REQUESTERS) - 1), amounts, st.integers(2, 8)),
    st.just(Expire()),
    st.builds(LateSettle, st.integers(0, 50), st.integers(0, 4)),
)
caps = st.one_of(st.none(), st.integers(0, 1500))
windows = st.sampled_from(["total", "monthly"])  # daily would flake across midnight


@st.composite
def limits(draw: st.DrawFn) -> dict[str, BudgetSpec | None]:
    names = [GLOBAL_SCOPE, *{tenant_scope(t) for t, _ in REQUESTERS}]
    names += [key_scope(t, k) for t, k in REQUESTERS]
    out: dict[str, BudgetSpec | None] = {}
    for name in names:
        cap = draw(caps)
        out[name] = None if cap is None else BudgetSpec(limit_usd=cap * UNIT, window=draw(windows))
    return out


# ---- the model -----------------------------------------------------------------------


@dataclass
class Held:
    reservation: Reservation
    who: int
    amount: int
    sent: float = 0.0  # the store's clock before the reserve was sent: lapses after sent + TTL
    answered: float = 0.0  # and after it answered: lapsed by answered + TTL


@dataclass
class Model:
    limits: dict[str, BudgetSpec | None]
    spent: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    overshoot: dict[str, int] = field(default_factory=dict)  # charged by late settles
    live: list[Held] = field(default_factory=list)
    dead: list[Held] = field(default_factory=list)
    lapsed: list[Held] = field(default_factory=list)
    settled: list[tuple[Held, int]] = field(default_factory=list)
    tenant_cost: dict[str, int] = field(default_factory=dict)
    serial: int = 0

    def scopes(self, who: int) -> list[Scope]:
        tenant, key = REQUESTERS[who]
        names = [GLOBAL_SCOPE, tenant_scope(tenant), key_scope(tenant, key)]
        return [Scope(name, self.limits[name]) for name in names]

    def all_scopes(self) -> list[Scope]:
        return [Scope(name, limit) for name, limit in self.limits.items()]

    def left(self, who: int) -> tuple[int | None, str]:
        best: int | None = None
        binding = ""
        for scope in self.scopes(who):
            if scope.limit is None:
                continue
            room = units(scope.limit.limit_usd) - self.spent.get(scope.name, 0)
            room -= self.held.get(scope.name, 0)
            if best is None or room < best:
                best, binding = room, scope.name
        return best, binding

    def add(self, counter: dict[str, int], who: int, amount: int) -> None:
        for scope in self.scopes(who):
            counter[scope.name] = counter.get(scope.name, 0) + amount

    def next_id(self) -> str:
        self.serial += 1
        return f"req-{self.serial}"


# ---- the two stores, each with a long-TTL view (live replicas) and a short one (dying) --


class Reserver(Protocol):
    async def reserve(
        self, request_id: str, scopes: Sequence[Scope], candidates_usd: Sequence[float]
    ) -> Reservation | Denied: ...


class ManualClock:
    """Unix seconds that move only when ``advance`` says (the memory store's clock)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, to: float) -> None:
        self.now = max(self.now, to)


@dataclass
class Stores:
    live: BudgetStore
    dying: Reserver
    ledger: Ledger
    manual: ManualClock | None = None  # None: the store keeps real time (Redis TIME)

    def clock(self) -> float:
        """The store's clock as the test reads it (Redis's TIME is this host's time)."""
        return time.time() if self.manual is None else self.manual()

    async def pass_until(self, when: float) -> None:
        if self.manual is not None:
            self.manual.advance(when)
        else:
            await asyncio.sleep(max(0.0, when - time.time()))


class _ShortLived:
    """The memory store's reserve with a short TTL (one process: the same state)."""

    def __init__(self, store: MemoryBudgetStore, ttl_s: float) -> None:
        self.store, self.ttl_s = store, ttl_s

    async def reserve(
        self, request_id: str, scopes: Sequence[Scope], candidates_usd: Sequence[float]
    ) -> Reservation | Denied:
        long_ttl, self.store.ttl_s = self.store.ttl_s, self.ttl_s
        try:  # reserve never awaits: nothing else runs while the TTL is swapped
            return await self.store.reserve(request_id, scopes, candidates_usd)
        finally:
            self.store.ttl_s = long_ttl


def event(held: Held, cost: int) -> SpendEvent:
    tenant, key = REQUESTERS[held.who]
    return SpendEvent(
        ts=time.time(), request_id=held.reservation.request_id, tenant=tenant, key_id=key,
        tier="small", model="m", cost_usd=cost * UNIT,
    )  # fmt: skip


async def check(stores: Stores, model: Model) -> None:
    """Counters equal the model's; spend (and spend + holds) within caps plus overshoot."""
    for status in await stores.live.status(model.all_scopes()):
        name = status.scope
        assert units(status.spent_usd) == model.spent.get(name, 0), name
        assert units(status.held_usd) == model.held.get(name, 0), name
        limit = model.limits[name]
        if limit is not None:
            bound = units(limit.limit_usd) + model.overshoot.get(name, 0)
            assert units(status.spent_usd) <= bound, name
            assert units(status.spent_usd) + units(status.held_usd) <= bound, name


async def apply(op: Op, stores: Stores, model: Model) -> None:
    if isinstance(op, Reserve):
        room, binding = model.left(op.who)
        rid = model.next_id()
        store = stores.dying if op.dies else stores.live
        usd = [c * UNIT for c in op.candidates]
        sent = stores.clock()
        answer = await store.reserve(rid, model.scopes(op.who), usd)
        answered = stores.clock()
        fits = [i for i, c in enumerate(op.candidates) if room is None or c <= room]
        if not fits:
            assert isinstance(answer, Denied)
            assert (answer.scope, units(answer.remaining_usd)) == (binding, room)
            assert units(answer.needed_usd) == min(op.candidates)
            return
        assert isinstance(answer, Reservation) and answer.choice == fits[0]
        amount = op.candidates[fits[0]]
        assert units(answer.amount_usd) == amount
        model.add(model.held, op.who, amount)
        held = Held(answer, op.who, amount, sent, answered)
        (model.dead if op.dies else model.live).append(held)
    elif isinstance(op, Settle) and model.live:
        held = model.live.pop(op.pick % len(model.live))
        cost = held.amount * op.quarters // 4
        assert await stores.live.settle(held.reservation, cost * UNIT, event(held, cost))
        model.add(model.held, held.who, -held.amount)
        model.add(model.spent, held.who, cost)
        tenant = REQUESTERS[held.who][0]
        model.tenant_cost[tenant] = model.tenant_cost.get(tenant, 0) + cost
        model.settled.append((held, cost))
    elif isinstance(op, Retry) and model.settled:
        held, cost = model.settled[op.pick % len(model.settled)]
        assert not await stores.live.settle(held.reservation, cost * UNIT, event(held, cost))
    elif isinstance(op, Extend) and model.live:
        assert await stores.live.extend(model.live[op.pick % len(model.live)].reservation)
    elif isinstance(op, Burst):
        room, _ = model.left(op.who)
        rids = [model.next_id() for _ in range(op.count)]
        scopes = model.scopes(op.who)
        answers = await asyncio.gather(
            *(stores.live.reserve(rid, scopes, [op.amount * UNIT]) for rid in rids)
        )
        won = [a for a in answers if isinstance(a, Reservation)]
        expected = op.count if room is None else max(0, min(op.count, room // op.amount))
        assert len(won) == expected  # all-or-nothing per request, and no more than fits
        for answer in won:
            model.add(model.held, op.who, op.amount)
            model.live.append(Held(answer, op.who, op.amount))
    elif isinstance(op, Expire):
        await lapse(stores, model)
    elif isinstance(op, LateSettle) and model.lapsed:
        held = model.lapsed.pop(op.pick % len(model.lapsed))
        cost = held.amount * op.quarters // 4
        assert not await stores.live.extend(held.reservation)  # the hold is gone
        assert await stores.live.settle(held.reservation, cost * UNIT, event(held, cost))
        model.add(model.spent, held.who, cost)
        model.add(model.overshoot, held.who, cost)
        tenant = REQUESTERS[held.who][0]
        model.tenant_cost[tenant] = model.tenant_cost.get(tenant, 0) + cost
        model.settled.append((held, cost))


async def lapse(stores: Stores, model: Model) -> None:
    """Let the TTL pass: every dead replica's hold returns its money."""
    if model.dead:
        await stores.pass_until(max(h.answered for h in model.dead) + DEAD_TTL_S + 0.02)
    for held in model.dead:
        model.add(model.held, held.who, -held.amount)
    model.lapsed += model.dead
    model.dead = []


def too_slow(stores: Stores, model: Model) -> bool:
    """Whether a dead hold may have lapsed on its own by now (its reserve was sent nearly
    a TTL ago on the store's clock; Redis counts whole ms): the model cannot tell what
    the store answered since. Never on the memory store, whose clock the test moves."""
    return any(stores.clock() - h.sent > DEAD_TTL_S * 0.9 for h in model.dead)


async def run(kind: str, limits_: dict[str, BudgetSpec | None], steps: list[Op]) -> bool:
    """Play the steps against a fresh store; False when the example had to be discarded."""
    if kind == "memory":
        memory_ledger, clock = MemoryLedger(), ManualClock()
        memory = MemoryBudgetStore(memory_ledger, ttl_s=LIVE_TTL_S, clock=clock)
        return await play(
            Stores(memory, _ShortLived(memory, DEAD_TTL_S), memory_ledger, clock), limits_, steps
        )
    async with redis_store(REDIS7_URL) as owner:
        redis_ledger = RedisLedger(owner)
        stores = Stores(
            RedisBudgetStore(redis_ledger, ttl_s=LIVE_TTL_S),
            RedisBudgetStore(redis_ledger, ttl_s=DEAD_TTL_S),
            redis_ledger,
        )
        return await play(stores, limits_, steps)


async def play(stores: Stores, limits_: dict[str, BudgetSpec | None], steps: list[Op]) -> bool:
    model = Model(dict(limits_))
    for op in steps:
        try:
            await apply(op, stores, model)
            await check(stores, model)
        except AssertionError:
            if too_slow(stores, model):  # a dead hold may have lapsed during the step
                return False
            raise
        if too_slow(stores, model):
            return False
    for held in list(model.live):  # every live request ends
        model.live.remove(held)
        assert await stores.live.settle(held.reservation, 0.0, event(held, 0))
        model.add(model.held, held.who, -held.amount)
    await lapse(stores, model)
    await check(stores, model)
    assert await stores.live.active_holds() == 0
    assert all(s.held_usd == 0 for s in await stores.live.status(model.all_scopes()))
    today = datetime.now(UTC).date()
    tenants = sorted({t for t, _ in REQUESTERS})
    days = await stores.ledger.daily(tenants, today, today)
    ledger_cost = {a.tenant: a.get("cost_usd") for a in days}
    for tenant in tenants:
        expected = model.tenant_cost.get(tenant, 0) * UNIT
        assert ledger_cost.get(tenant, 0.0) == pytest.approx(expected, abs=1e-9)
    assert sum(model.tenant_cost.values()) == model.spent.get(GLOBAL_SCOPE, 0)
    return True


def budget_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    )


STEPS = st.lists(ops, min_size=1, max_size=25)


@budget_settings(60)
@given(limits_=limits(), steps=STEPS)
def test_memory_store_never_passes_a_cap_nor_leaves_a_hold(
    limits_: dict[str, BudgetSpec | None], steps: list[Op]
) -> None:
    assume(asyncio.run(run("memory", limits_, steps)))


@budget_settings(40)
@given(limits_=limits(), steps=STEPS)
def test_redis_store_never_passes_a_cap_nor_leaves_a_hold(
    limits_: dict[str, BudgetSpec | None], steps: list[Op]
) -> None:
    assume(asyncio.run(run("redis", limits_, steps)))
