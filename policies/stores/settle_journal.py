"""Spend that cannot be settled now is journaled on local disk and settled later, never lost.

When the budget store refuses a settle (Redis down, out of memory, read-only: all
``StoreUnavailable``), the settle is appended to this replica's journal, one JSON line,
written and fsynced before the request's answer is finished, and retried in the
background and at the next start until the store takes it. The same holds for spend
that ran with no hold at all (a tenant with ``budget_fail_open`` while the store was
down): it is journaled as a ``charge`` of every scope, so failing open never skips the
counters.

Replays are idempotent by request id: the store ignores a second settle or charge of an
id for one reservation TTL, so an entry whose first try did reach Redis (the reply was
lost) charges once. While an entry waits, its reservation's hold stays counted in Redis
until the hold's own TTL; an outage longer than that can let other requests spend that
money before the replay charges it, by at most the journaled amounts (``pending_usd``).

Files: ``DIR/settle-<host>-<pid>-<n>.jsonl``, each held under an exclusive ``flock`` by
the process writing it. At start a replica adopts every journal in ``DIR`` no live
process holds (its own from before a restart, or a dead neighbour's), replays them and
deletes them once empty. Lines: ``{"op": "settle"|"charge", ...}`` and ``{"done": id}``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from policies.stores.budget import BudgetStore, Reservation, Scope, decode_limit, encode_limit
from policies.stores.ledger import SpendEvent
from policies.stores.store import StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Pending:
    """One settle (``reservation`` set) or charge (``scopes`` set) the store has not taken."""

    request_id: str
    cost_usd: float
    event: SpendEvent | None
    reservation: Reservation | None = None
    scopes: tuple[Scope, ...] = ()

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "op": "settle" if self.reservation is not None else "charge",
            "id": self.request_id,
            "cost_usd": self.cost_usd,
            "event": None if self.event is None else self.event.to_fields(),
        }
        if self.reservation is not None:
            r = self.reservation
            body["reservation"] = [r.amount_usd, r.choice, list(r.fields)]
        else:
            body["scopes"] = [[s.name, encode_limit(s.limit)] for s in self.scopes]
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Pending:
        event = None if body["event"] is None else SpendEvent.from_fields(body["event"])
        if body["op"] == "settle":
            amount, choice, fields = body["reservation"]
            held = Reservation(body["id"], float(amount), int(choice), tuple(fields))
            return cls(body["id"], float(body["cost_usd"]), event, reservation=held)
        scopes = tuple(Scope(name, decode_limit(limit)) for name, limit in body["scopes"])
        return cls(body["id"], float(body["cost_usd"]), event, scopes=scopes)


class SettleJournal:
    """Settles through the store, or journals what the store refuses (see the module doc).

    ``folder`` None keeps pending entries in memory only (the in-process store, which
    never refuses: nothing to outlive)."""

    def __init__(self, budgets: BudgetStore, folder: Path | None) -> None:
        self.budgets = budgets
        self.folder = folder
        self._pending: dict[str, Pending] = {}
        self._own: IO[str] | None = None
        self._adopted: list[IO[str]] = []
        self._lock = threading.Lock()  # appends run in worker threads
        self._replaying = asyncio.Lock()
        self.replayed = 0  # entries the store took on a replay (for tests and logs)

    # ---- what the request path calls --------------------------------------------------

    async def settle(
        self, reservation: Reservation, cost_usd: float, event: SpendEvent | None
    ) -> None:
        entry = Pending(reservation.request_id, cost_usd, event, reservation=reservation)
        await self._apply_or_journal(entry)

    async def charge(
        self, request_id: str, scopes: Sequence[Scope], cost_usd: float, event: SpendEvent | None
    ) -> None:
        await self._apply_or_journal(Pending(request_id, cost_usd, event, scopes=tuple(scopes)))

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def pending_usd(self) -> float:
        return sum(p.cost_usd for p in self._pending.values())

    # ---- replay -----------------------------------------------------------------------

    def open(self) -> int:
        """Adopt the journals no live process holds; returns how many entries wait."""
        if self.folder is None or not self.folder.is_dir():
            return 0
        for path in sorted(self.folder.glob("settle-*.jsonl")):
            handle = path.open("a+", encoding="utf-8")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a live replica's own journal
                handle.close()
                continue
            handle.seek(0)
            for entry in _read(handle, path):
                self._pending.setdefault(entry.request_id, entry)
            self._adopted.append(handle)
        if self._pending:
            log.warning("journal: %d unsettled entries to replay", len(self._pending))
        return len(self._pending)

    async def replay(self) -> int:
        """One pass over what waits, oldest first; stops at the first refusal."""
        async with self._replaying:
            taken = 0
            for entry in list(self._pending.values()):
                try:
                    await self._apply(entry)
                except StoreUnavailable:
                    break
                del self._pending[entry.request_id]
                await asyncio.to_thread(self._append, {"done": entry.request_id})
                taken += 1
            self.replayed += taken
            if taken:
                log.info("journal: settled %d entries, %d wait", taken, len(self._pending))
            if not self._pending:
                await asyncio.to_thread(self._compact)
            return taken

    async def run(self, period_s: float) -> None:
        """The background replayer (the lifespan starts and cancels it)."""
        while True:
            await asyncio.sleep(period_s)
            if self._pending:
                await self.replay()

    def close(self) -> None:
        for handle in [*self._adopted, *([self._own] if self._own else [])]:
            handle.close()
        self._adopted, self._own = [], None

    # ---- inside -----------------------------------------------------------------------

    async def _apply(self, entry: Pending) -> None:
        if entry.reservation is not None:
            await self.budgets.settle(entry.reservation, entry.cost_usd, entry.event)
        else:
            await self.budgets.charge(entry.request_id, entry.scopes, entry.cost_usd, entry.event)

    async def _apply_or_journal(self, entry: Pending) -> None:
        try:
            await self._apply(entry)
            return
        except StoreUnavailable as exc:
            # An error until it is settled: the counters lag this spend meanwhile.
            log.error(
                "journal: %s of %s (%.8f USD) deferred, the store refused it: %s",
                entry.to_json()["op"], entry.request_id, entry.cost_usd, exc,
            )  # fmt: skip
        self._pending[entry.request_id] = entry
        await asyncio.to_thread(self._append, entry.to_json())

    def _append(self, line: dict[str, Any]) -> None:
        if self.folder is None:
            return
        with self._lock:
            if self._own is None:
                self._own = self._create()
            self._own.write(json.dumps(line, separators=(",", ":")) + "\n")
            self._own.flush()
            os.fsync(self._own.fileno())

    def _create(self) -> IO[str]:
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = f"settle-{socket.gethostname()}-{os.getpid()}"
        n = 0
        while True:
            path = self.folder / f"{stem}-{n}.jsonl"
            try:
                handle = path.open("x", encoding="utf-8")
            except FileExistsError:
                n += 1
                continue
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle

    def _compact(self) -> None:
        """Nothing waits: delete every journal this process holds (the next refusal
        starts a fresh one)."""
        with self._lock:
            for handle in [*self._adopted, *([self._own] if self._own else [])]:
                Path(handle.name).unlink(missing_ok=True)  # unlinked while still locked
                handle.close()
            self._adopted, self._own = [], None


def _read(handle: IO[str], path: Path) -> list[Pending]:
    """Entries not marked done, in file order; a torn last line (a crash mid-write) is
    skipped with a warning, since its request never finished being answered."""
    entries: dict[str, Pending] = {}
    for number, line in enumerate(handle, 1):
        try:
            body = json.loads(line)
        except json.JSONDecodeError:
            log.warning("journal %s:%d: unreadable line skipped", path, number)
            continue
        if "done" in body:
            entries.pop(str(body["done"]), None)
        else:
            entry = Pending.from_json(body)
            entries[entry.request_id] = entry
    return list(entries.values())
