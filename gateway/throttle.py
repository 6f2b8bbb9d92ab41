"""Wrong-guess throttling for the admin key: per client address and in total.

Fixed one-minute windows kept in this process: a replica counts the guesses it sees
(behind a load balancer, give each replica the client's address through the proxy
headers uvicorn trusts). Memory is bounded: only guesses that were let through are
counted, so a window holds at most ``total`` addresses.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class GuessThrottle:
    def __init__(
        self,
        per_client: int,
        total: int,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.total = total
        self.window_s = window_s
        self.clock = clock
        self._window = -1
        self._failures: dict[str, int] = {}
        self._all = 0

    def _roll(self) -> float:
        now = self.clock()
        window = int(now // self.window_s)
        if window != self._window:
            self._window, self._failures, self._all = window, {}, 0
        return (window + 1) * self.window_s - now

    def retry_after(self, client: str) -> float | None:
        """Seconds until ``client`` may guess again, or None when it may now."""
        left = self._roll()
        if self._all >= self.total or self._failures.get(client, 0) >= self.per_client:
            return left
        return None

    def failed(self, client: str) -> None:
        self._roll()
        self._failures[client] = self._failures.get(client, 0) + 1
        self._all += 1
