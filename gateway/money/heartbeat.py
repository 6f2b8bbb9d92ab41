"""A hold's heartbeat: while its request runs, the reservation's deadline is pushed out
(``BudgetStore.extend``), so only a replica that died lets its holds lapse
(``gateway.money.hold.Hold`` starts it at admission and stops it at close)."""

from __future__ import annotations

import asyncio
import logging

from policies.schema import GatewayConfig
from policies.stores.budget import BudgetStore, Reservation
from policies.stores.store import StoreUnavailable

log = logging.getLogger(__name__)


def keep_alive(
    budgets: BudgetStore, config: GatewayConfig, reservation: Reservation | None
) -> Heartbeat | None:
    """While the request runs, push its hold's deadline out every third of the TTL, so
    only a replica that died (and stopped beating) lets its holds lapse."""
    if reservation is None:  # failed open: nothing is held
        return None
    return Heartbeat(budgets, reservation, config.budgets.reservation_ttl_s / 3)


class Heartbeat:
    """A timer on the loop that extends one hold every ``period`` until cancelled: nearly
    every request ends before its first beat, and a timer set and cancelled costs a
    fraction of a task started and cancelled."""

    def __init__(self, budgets: BudgetStore, reservation: Reservation, period: float) -> None:
        self.budgets, self.reservation, self.period = budgets, reservation, period
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(period, self._beat)
        self._beating: asyncio.Task[None] | None = None

    def _beat(self) -> None:
        self._beating = self._loop.create_task(self._extend())

    async def _extend(self) -> None:
        try:
            alive = await self.budgets.extend(self.reservation)
        except StoreUnavailable as exc:  # beat again next period
            log.warning("could not extend the hold of %s: %s", self.reservation.request_id, exc)
            alive = True
        if not alive:
            log.warning("the hold of %s lapsed while it ran", self.reservation.request_id)
            return
        self._timer = self._loop.call_later(self.period, self._beat)

    def cancel(self) -> None:
        self._timer.cancel()
        if self._beating is not None:
            self._beating.cancel()
