"""Budgets: the contract every budget store keeps, and the values it trades in.

A request reserves its worst-case cost on every scope it spends from (the global cap,
its tenant, its API key) in one step that succeeds on all of them or on none. When it
ends, ``settle`` charges what it really cost and drops the hold. A hold that is never
settled (its replica died) lapses after the store's TTL and its money is free again;
a request that runs longer than that keeps its hold alive with ``extend``.

Amounts are integer nano-dollars inside the stores, so holds return exactly to zero
and counters never drift; the API speaks USD floats.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from policies.schema import BudgetSpec
from policies.stores.ledger import SpendEvent

NANO = 1_000_000_000


def to_nano(usd: float) -> int:
    """Round up: a reservation is never smaller than the cost it stands for."""
    return math.ceil(usd * NANO - 1e-6)


def to_usd(nano: int | float) -> float:
    return float(nano) / NANO


def window_ids(ts: float) -> tuple[str, str]:
    """The current daily and monthly window ids (UTC)."""
    return _day_windows(math.floor(ts / DAY_S))


DAY_S = 86_400  # a UTC day in unix seconds (which have no leap seconds)


@functools.lru_cache(maxsize=8)
def _day_windows(day: int) -> tuple[str, str]:
    """A day's ids, computed once: two to four calls per request, one day at a time."""
    moment = datetime.fromtimestamp(day * DAY_S, UTC)
    return f"d:{moment.date().isoformat()}", f"m:{moment.year:04d}-{moment.month:02d}"


def window_field(scope: str, window: str, ts: float) -> str:
    day, month = window_ids(ts)
    wid = {"daily": day, "monthly": month}.get(window, "total")
    return f"{scope}|{wid}"


def tenant_scope(tenant: str) -> str:
    return f"tenant:{tenant}"


def key_scope(tenant: str, key_id: str) -> str:
    return f"key:{tenant}:{key_id}"


GLOBAL_SCOPE = "global"


@dataclass(frozen=True, slots=True)
class Scope:
    """One counter a request spends from, with its configured cap (``None``: uncapped).

    A runtime override set through the admin API replaces ``limit`` inside the store.
    """

    name: str
    limit: BudgetSpec | None


@dataclass(frozen=True, slots=True)
class Reservation:
    request_id: str
    amount_usd: float
    choice: int  # index of the candidate cost that fitted (0: the first, most capable)
    fields: tuple[str, ...]  # the scope/window counters it holds and settles on


@dataclass(frozen=True, slots=True)
class Denied:
    scope: str  # the scope with the least money left
    remaining_usd: float
    needed_usd: float  # the cheapest candidate
    # The least any capped scope would have left were every open hold settled for nothing
    # (its limit minus its spend): below ``needed_usd`` the refusal is final; at or above
    # it, holds now open may leave room once they settle. None: not known.
    unheld_usd: float | None = None

    @property
    def final(self) -> bool:
        """Whether no settlement of the holds now open can make room for this request."""
        return self.unheld_usd is None or self.unheld_usd < self.needed_usd


@dataclass(frozen=True, slots=True)
class ScopeStatus:
    scope: str
    limit_usd: float | None
    window: str
    spent_usd: float
    held_usd: float
    overridden: bool

    @property
    def remaining_usd(self) -> float | None:
        if self.limit_usd is None:
            return None
        return self.limit_usd - self.spent_usd - self.held_usd


class BudgetStore(Protocol):
    async def reserve(
        self, request_id: str, scopes: Sequence[Scope], candidates_usd: Sequence[float]
    ) -> Reservation | Denied:
        """Hold the first candidate cost that fits every capped scope, all at once."""
        ...

    async def settle(
        self, reservation: Reservation, cost_usd: float, event: SpendEvent | None = None
    ) -> bool:
        """Charge ``cost_usd``, drop the hold and append ``event``; once per request id."""
        ...

    async def charge(
        self,
        request_id: str,
        scopes: Sequence[Scope],
        cost_usd: float,
        event: SpendEvent | None = None,
    ) -> bool:
        """Charge spend that ran without a hold (its tenant failed open while the store was
        down) to every scope's current window, cap or no cap: the money is already spent.
        Once per request id, like ``settle``."""
        ...

    async def extend(self, reservation: Reservation) -> bool:
        """Push a live hold's deadline one TTL from now (a long request's heartbeat);
        False when the hold is gone (settled, or already lapsed)."""
        ...

    async def status(self, scopes: Sequence[Scope]) -> list[ScopeStatus]: ...

    async def set_limit(self, scope: str, limit: BudgetSpec | None) -> None:
        """Override the configured cap at run time (``None``: uncapped)."""
        ...

    async def clear_limit(self, scope: str) -> None:
        """Drop the override; the configured cap applies again."""
        ...

    async def active_holds(self) -> int:
        """Unexpired reservations (expired ones are purged first)."""
        ...


def encode_limit(limit: BudgetSpec | None) -> str:
    return "- total" if limit is None else f"{to_nano(limit.limit_usd)} {limit.window}"


def decode_limit(raw: str) -> BudgetSpec | None:
    amount, _, window = raw.partition(" ")
    if amount == "-":
        return None
    return BudgetSpec(limit_usd=to_usd(int(amount)), window=window)
