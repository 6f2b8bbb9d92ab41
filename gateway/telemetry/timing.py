"""Per-stage timing of one request, reported in a ``Server-Timing`` header when enabled.

Stages report themselves without anything being passed down: ``lap("auth")`` records
the time since the previous lap (or the request's start), ``with timed("embed"):``
times a block. The timer travels in a context variable; with the header disabled (the
default) no timer exists and each call costs one context-variable read.
"""

from __future__ import annotations

from contextvars import ContextVar
from time import perf_counter
from types import TracebackType

_current: ContextVar[StageTimer | None] = ContextVar("tiergate_stage_timer", default=None)


class StageTimer:
    __slots__ = ("last", "stages", "started")

    def __init__(self) -> None:
        self.started = self.last = perf_counter()
        self.stages: list[tuple[str, float]] = []

    def add(self, name: str, seconds: float) -> None:
        self.stages.append((name, seconds))
        self.last = perf_counter()

    def header(self) -> str:
        total = perf_counter() - self.started
        parts = [f"{name};dur={seconds * 1000:.3f}" for name, seconds in self.stages]
        parts.append(f"total;dur={total * 1000:.3f}")
        return ", ".join(parts)


def begin_request(enabled: bool) -> None:
    """Called once at the top of a request handler (each request task has its own context)."""
    if enabled:
        _current.set(StageTimer())


def current_timer() -> StageTimer | None:
    return _current.get()


def lap(name: str) -> None:
    timer = _current.get()
    if timer is not None:
        timer.add(name, perf_counter() - timer.last)


class timed:
    __slots__ = ("_name", "_started", "_timer")

    def __init__(self, name: str) -> None:
        self._name = name
        self._timer = _current.get()
        self._started = 0.0

    def __enter__(self) -> None:
        if self._timer is not None:
            self._started = perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.add(self._name, perf_counter() - self._started)
