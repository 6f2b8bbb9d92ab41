"""Rate limits: requests and tokens per sliding minute, per tenant and per API key.

A sliding log (every admitted request's time, and its token count) is exact: no
60-second span ever holds more than the limit, which a fixed window (up to twice the
limit across a boundary) or a token bucket with a full burst cannot promise.
A request is admitted on all its scopes at once or on none.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from policies.schema import RateLimitSpec

WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class RateScope:
    name: str  # tenant:NAME or key:TENANT:ID
    spec: RateLimitSpec


@dataclass(frozen=True, slots=True)
class RateWindow:
    """The tightest scope's view of one kind (requests or tokens), after this request."""

    limit: int
    remaining: int
    reset_s: float  # until the oldest entry leaves the window


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: float
    refused_by: str | None
    requests: RateWindow | None
    tokens: RateWindow | None

    def headers(self) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers (and ``Retry-After`` on a refusal)."""
        out: dict[str, str] = {}
        for kind, window in (("requests", self.requests), ("tokens", self.tokens)):
            if window is None:
                continue
            out[f"x-ratelimit-limit-{kind}"] = str(window.limit)
            out[f"x-ratelimit-remaining-{kind}"] = str(max(window.remaining, 0))
            out[f"x-ratelimit-reset-{kind}"] = format_duration(window.reset_s)
        if not self.allowed:
            out["Retry-After"] = str(max(math.ceil(self.retry_after_s), 1))
        return out


def format_duration(seconds: float) -> str:
    """OpenAI's style: ``1s``, ``6m0s``, ``250ms``."""
    if seconds < 1:
        return f"{max(int(seconds * 1000), 0)}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes:
        return f"{int(minutes)}m{int(rest)}s"
    return f"{rest:.3g}s"


def tightest(windows: Sequence[RateWindow]) -> RateWindow | None:
    return min(windows, key=lambda w: (w.remaining, -w.reset_s), default=None)


class RateLimiter(Protocol):
    async def acquire(
        self, request_id: str, scopes: Sequence[RateScope], tokens: int
    ) -> RateDecision:
        """Admit on every scope or on none; ``tokens`` is the request's upper estimate."""
        ...

    async def correct(
        self, request_id: str, scopes: Sequence[RateScope], estimated: int, actual: int
    ) -> None:
        """Once the request has ended: count its real tokens instead of the estimate
        (if its entry is still in the window)."""
        ...


class MemoryRateLimiter:
    """One process: a deque of (time, tokens) per scope and kind."""

    def __init__(self, *, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._requests: dict[str, deque[float]] = {}
        self._tokens: dict[str, deque[tuple[float, int, str]]] = {}
        self._token_sums: dict[str, int] = {}

    def _trim(self, name: str, cutoff: float) -> None:
        log = self._requests.setdefault(name, deque())
        while log and log[0] <= cutoff:
            log.popleft()
        tokens = self._tokens.setdefault(name, deque())
        while tokens and tokens[0][0] <= cutoff:
            self._token_sums[name] = self._token_sums.get(name, 0) - tokens.popleft()[1]

    async def acquire(
        self, request_id: str, scopes: Sequence[RateScope], tokens: int
    ) -> RateDecision:
        clock = time.time()
        allowed, retry, refused = True, 0.0, None
        req_windows: list[RateWindow] = []
        tok_windows: list[RateWindow] = []
        for scope in scopes:
            self._trim(scope.name, clock - self.window_s)
            log, tlog = self._requests[scope.name], self._tokens[scope.name]
            rpm, tpm = scope.spec.requests_per_minute, scope.spec.tokens_per_minute
            if rpm is not None:
                used = len(log)
                if used + 1 > rpm:
                    allowed, refused = False, scope.name
                    retry = max(retry, log[used - rpm] + self.window_s - clock)
                reset = log[0] + self.window_s - clock if log else 0.0
                req_windows.append(RateWindow(rpm, rpm - used - 1, reset))
            if tpm is not None:
                used_t = self._token_sums.get(scope.name, 0)
                if used_t + tokens > tpm:
                    allowed, refused = False, scope.name
                    retry = max(retry, self._token_wait(tlog, used_t + tokens - tpm, tpm, tokens))
                reset = tlog[0][0] + self.window_s - clock if tlog else 0.0
                tok_windows.append(RateWindow(tpm, tpm - used_t - tokens, reset))
        if allowed:
            for scope in scopes:
                if scope.spec.requests_per_minute is not None:
                    self._requests[scope.name].append(clock)
                if scope.spec.tokens_per_minute is not None:
                    self._tokens[scope.name].append((clock, tokens, request_id))
                    self._token_sums[scope.name] = self._token_sums.get(scope.name, 0) + tokens
        return RateDecision(
            allowed=allowed,
            retry_after_s=retry,
            refused_by=refused,
            requests=tightest(req_windows),
            tokens=tightest(tok_windows),
        )

    async def correct(
        self, request_id: str, scopes: Sequence[RateScope], estimated: int, actual: int
    ) -> None:
        for scope in scopes:
            log = self._tokens.get(scope.name, deque())
            for i, (at, count, rid) in enumerate(log):
                if rid == request_id and count == estimated:
                    log[i] = (at, actual, rid)
                    self._token_sums[scope.name] += actual - estimated
                    break

    def _token_wait(
        self, log: deque[tuple[float, int, str]], need: int, tpm: int, tokens: int
    ) -> float:
        if tokens > tpm:
            return self.window_s
        clock, freed = time.time(), 0
        for at, count, _ in log:
            freed += count
            if freed >= need:
                return at + self.window_s - clock
        return self.window_s
