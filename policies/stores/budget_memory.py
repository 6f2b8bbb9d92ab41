"""The budget store for one process: the same contract as Redis, atomic because each
method runs to completion on the event loop without awaiting in between."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from policies.schema import BudgetSpec
from policies.stores.budget import (
    Denied,
    Reservation,
    Scope,
    ScopeStatus,
    to_nano,
    to_usd,
    window_field,
    window_ids,
)
from policies.stores.ledger import MemoryLedger, SpendEvent


@dataclass(frozen=True, slots=True)
class _Hold:
    amount: int
    choice: int
    fields: tuple[str, ...]
    deadline: float


class MemoryBudgetStore:
    def __init__(
        self,
        ledger: MemoryLedger,
        *,
        ttl_s: float = 120.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.ttl_s = ttl_s
        self.clock = clock  # unix seconds: hold deadlines, settled ids, the day and month
        self._limits: dict[str, BudgetSpec | None] = {}
        self._spent: dict[str, int] = {}
        self._held: dict[str, int] = {}
        self._holds: dict[str, _Hold] = {}
        # At most the earliest deadline of any hold: until the clock reaches it, none has
        # expired and ``_purge`` scans nothing (a scan per request was O(holds in flight)).
        self._next_expiry = math.inf
        self._settled: dict[str, float] = {}
        self._windows: tuple[str, str] = ("", "")  # the day and month ids counted in

    def _release(self, request_id: str) -> None:
        hold = self._holds.pop(request_id, None)
        if hold is None:
            return
        for field in hold.fields:
            left = self._held.get(field, 0) - hold.amount
            if left <= 0:
                self._held.pop(field, None)
            else:
                self._held[field] = left

    def _purge(self, clock: float) -> None:
        if clock < self._next_expiry:
            return
        for request_id in [r for r, h in self._holds.items() if h.deadline <= clock]:
            self._release(request_id)
        self._next_expiry = min((h.deadline for h in self._holds.values()), default=math.inf)

    def _hold(self, request_id: str, hold: _Hold) -> None:
        self._holds[request_id] = hold
        self._next_expiry = min(self._next_expiry, hold.deadline)

    def _limit(self, scope: Scope) -> tuple[BudgetSpec | None, bool]:
        if scope.name in self._limits:
            return self._limits[scope.name], True
        return scope.limit, False

    async def reserve(
        self, request_id: str, scopes: Sequence[Scope], candidates_usd: Sequence[float]
    ) -> Reservation | Denied:
        clock = self.clock()
        self._purge(clock)
        existing = self._holds.get(request_id)
        if existing is not None:
            return Reservation(
                request_id, to_usd(existing.amount), existing.choice, existing.fields
            )
        fields: list[str] = []
        best: int | None = None
        unheld: int | None = None
        binding = ""
        for scope in scopes:
            limit, _ = self._limit(scope)
            field = window_field(scope.name, "total" if limit is None else limit.window, clock)
            fields.append(field)
            if limit is None:
                continue
            room = to_nano(limit.limit_usd) - self._spent.get(field, 0)
            left = room - self._held.get(field, 0)
            if best is None or left < best:
                best, binding = left, scope.name
            unheld = room if unheld is None else min(unheld, room)
        for choice, cost in enumerate(candidates_usd):
            amount = to_nano(cost)
            if best is None or amount <= best:
                for field in fields:
                    self._held[field] = self._held.get(field, 0) + amount
                self._hold(request_id, _Hold(amount, choice, tuple(fields), clock + self.ttl_s))
                return Reservation(request_id, to_usd(amount), choice, tuple(fields))
        return Denied(
            binding,
            to_usd(best or 0),
            min(candidates_usd, default=0.0),
            None if unheld is None else to_usd(unheld),
        )

    async def settle(
        self, reservation: Reservation, cost_usd: float, event: SpendEvent | None = None
    ) -> bool:
        clock = self.clock()
        self._release(reservation.request_id)
        if reservation.request_id in self._settled:
            return False
        self._purge(clock)
        amount = to_nano(cost_usd)
        self._prune_windows(clock)
        for field in reservation.fields:
            self._spent[field] = self._spent.get(field, 0) + amount
        self._remember(reservation.request_id, clock)
        if event is not None:
            # MemoryLedger.record never awaits, so this stays one uninterrupted step.
            await self.ledger.record(event)
        return True

    async def charge(
        self,
        request_id: str,
        scopes: Sequence[Scope],
        cost_usd: float,
        event: SpendEvent | None = None,
    ) -> bool:
        clock = self.clock()
        if request_id in self._settled:
            return False
        self._prune_windows(clock)
        amount = to_nano(cost_usd)
        for scope in scopes:
            limit, _ = self._limit(scope)
            field = window_field(scope.name, "total" if limit is None else limit.window, clock)
            self._spent[field] = self._spent.get(field, 0) + amount
        self._remember(request_id, clock)
        if event is not None:
            await self.ledger.record(event)
        return True

    def _remember(self, request_id: str, clock: float) -> None:
        """A settled id is kept for one reservation TTL: long enough for a retried settle
        (or a late one from a replica that lost its hold) to be a no-op, and no longer, so
        memory is bounded by the request rate times the TTL. Oldest first (insertion
        order): drop from the front, O(1) amortised per settle."""
        self._settled[request_id] = clock
        cutoff = clock - self.ttl_s
        while self._settled:
            oldest = next(iter(self._settled))
            if self._settled[oldest] >= cutoff:
                break
            del self._settled[oldest]

    def _prune_windows(self, clock: float) -> None:
        """On a new day, forget the counters of windows before the previous one: nothing
        reads them (status and reserve count in the current window only)."""
        windows = window_ids(clock)
        if windows == self._windows:
            return
        keep = {*windows, *self._windows, "total"}
        self._windows = windows
        for field in [f for f in self._spent if f.rpartition("|")[2] not in keep]:
            del self._spent[field]

    async def extend(self, reservation: Reservation) -> bool:
        clock = self.clock()
        hold = self._holds.get(reservation.request_id)
        if hold is None or hold.deadline <= clock:
            return False
        self._hold(reservation.request_id, replace(hold, deadline=clock + self.ttl_s))
        return True

    async def status(self, scopes: Sequence[Scope]) -> list[ScopeStatus]:
        clock = self.clock()
        self._purge(clock)
        out: list[ScopeStatus] = []
        for scope in scopes:
            limit, overridden = self._limit(scope)
            window = "total" if limit is None else limit.window
            field = window_field(scope.name, window, clock)
            out.append(
                ScopeStatus(
                    scope=scope.name,
                    limit_usd=None if limit is None else to_usd(to_nano(limit.limit_usd)),
                    window=window,
                    spent_usd=to_usd(self._spent.get(field, 0)),
                    held_usd=to_usd(self._held.get(field, 0)),
                    overridden=overridden,
                )
            )
        return out

    async def set_limit(self, scope: str, limit: BudgetSpec | None) -> None:
        self._limits[scope] = limit

    async def clear_limit(self, scope: str) -> None:
        self._limits.pop(scope, None)

    async def active_holds(self) -> int:
        self._purge(self.clock())
        return len(self._holds)
