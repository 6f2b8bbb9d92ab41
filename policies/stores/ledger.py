"""The spend ledger: one event per settled request, plus per-tenant per-day aggregates.

The dashboard and the admin API read this. ``MemoryLedger`` (one process) is here;
``RedisLedger`` is in ``policies/stores/ledger_redis.py``.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol

import orjson

from policies.stores.latency_buckets import bucket_of

_OPTIONAL = frozenset(
    {"metadata", "server", "tool", "result_bytes", "arguments", "batch", "saved_batch_usd"}
    | {"judged", "escalated", "attempts", "escalation_added_usd"}
)


@functools.cache
def _always_stored() -> tuple[str, ...]:
    """The fields every stored event carries, in declaration order."""
    return tuple(f.name for f in fields(SpendEvent) if f.name not in _OPTIONAL)


def day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def days_between(start: date, end: date) -> list[str]:
    return [(start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]


@dataclass(frozen=True, slots=True)
class SpendEvent:
    """One settled request (``kind="request"``), one refused one (``kind="denied"``), or
    one MCP tool call (``kind="tool_call"``: ``tier`` is ``mcp``, ``model`` the
    ``SERVER.TOOL`` called, with its server, tool, result size and, where the tenant logs
    them, its arguments as JSON)."""

    ts: float
    request_id: str
    tenant: str
    key_id: str
    tier: str
    model: str
    kind: str = "request"  # request | denied | tool_call
    status: str = "ok"  # ok | error | cancelled | timeout | too_large | budget | rate_limit
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    saved_routing_usd: float = 0.0  # the large tier's price for this usage minus the cost
    saved_cache_usd: float = 0.0  # what a cache hit would have cost on its tier
    cache: str = "miss"  # miss | exact | semantic | bypass
    latency_ms: float = 0.0
    ttft_ms: float = 0.0
    downgraded: bool = False
    # The client's ``metadata`` (≤ 16 string pairs): an annotation, in no aggregate.
    metadata: Mapping[str, str] | None = None
    batch: bool = False  # a line of a batch job, charged at the batch price
    saved_batch_usd: float = 0.0  # the interactive price of the same answer, minus the cost
    # A tool call's (left out of a model call's stored fields).
    server: str = ""
    tool: str = ""
    result_bytes: int = 0
    arguments: str | None = None  # JSON, only where the tenant logs arguments
    # routing.escalation: a cheaper tier answered first and its answer was judged; it was
    # re-asked one tier up (``escalated``, two ``attempts``), the first attempt's cost
    # in ``cost_usd`` and also here.
    judged: bool = False
    escalated: bool = False
    attempts: int = 1
    escalation_added_usd: float = 0.0

    def to_fields(self) -> dict[str, str]:
        out = {}
        for name in _always_stored():  # not ``asdict``: it deep-copies, ~9x the CPU
            value = getattr(self, name)
            out[name] = str(int(value) if isinstance(value, bool) else value)
        if self.metadata:  # JSON; left out when there is none (most requests)
            out["metadata"] = orjson.dumps(self.metadata).decode()
        if self.server:
            out.update(server=self.server, tool=self.tool, result_bytes=str(self.result_bytes))
        if self.arguments is not None:
            out["arguments"] = self.arguments
        if self.batch:  # left out for interactive requests
            out.update(batch="1", saved_batch_usd=str(self.saved_batch_usd))
        if self.judged:  # left out where no cheap answer was judged
            out.update(
                judged="1",
                escalated=str(int(self.escalated)),
                attempts=str(self.attempts),
                escalation_added_usd=str(self.escalation_added_usd),
            )
        return out

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> SpendEvent:
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in raw:
                continue
            text = raw[f.name]
            kind = f.type if isinstance(f.type, str) else f.type.__name__
            if f.name == "metadata":
                values[f.name] = orjson.loads(text)
            elif kind == "bool":
                values[f.name] = text in ("1", "True", "true")
            elif kind == "int":
                values[f.name] = int(text)
            elif kind == "float":
                values[f.name] = float(text)
            else:
                values[f.name] = text
        return cls(**values)

    def increments(self) -> dict[str, float]:
        """What this event adds to its tenant's aggregate for its day."""
        if self.kind == "denied":
            return {f"denied_{self.status}": 1.0}
        if self.kind == "tool_call":
            return self._tool_increments()
        out = {
            "requests": 1.0,
            "cost_usd": self.cost_usd,
            "saved_routing_usd": self.saved_routing_usd,
            "saved_cache_usd": self.saved_cache_usd,
            "prompt_tokens": float(self.prompt_tokens),
            "cached_tokens": float(self.cached_tokens),
            "completion_tokens": float(self.completion_tokens),
            f"cache_{self.cache}": 1.0,
            f"tier_requests:{self.tier}": 1.0,
            f"tier_cost:{self.tier}": self.cost_usd,
            f"model_requests:{self.model}": 1.0,
            f"model_cost:{self.model}": self.cost_usd,
        }
        if self.status != "ok":
            out[f"status_{self.status}"] = 1.0
        else:
            out[f"latency_ms_le:{self.tier}:{bucket_of(self.latency_ms)}"] = 1.0
            out[f"ttft_ms_le:{self.tier}:{bucket_of(self.ttft_ms)}"] = 1.0
        if self.downgraded:
            out["downgraded"] = 1.0
        if self.batch:
            out["batch_requests"] = 1.0
            out["batch_cost_usd"] = self.cost_usd
            out["saved_batch_usd"] = self.saved_batch_usd
        if self.judged:
            out["escalation_judged"] = 1.0
            out["escalation_escalated" if self.escalated else "escalation_kept"] = 1.0
            out["escalation_added_usd"] = self.escalation_added_usd
        return out

    def _tool_increments(self) -> dict[str, float]:
        """A tool call's cost counts in the tenant's spend (its budgets paid it); its
        count, cost and failures also per ``SERVER.TOOL`` for the dashboard."""
        name = f"{self.server}.{self.tool}"
        out = {
            "cost_usd": self.cost_usd,
            "tool_calls": 1.0,
            "tool_cost_usd": self.cost_usd,
            f"tool_calls:{name}": 1.0,
            f"tool_cost:{name}": self.cost_usd,
            f"tool_ms:{name}": self.latency_ms,
        }
        if self.status != "ok":
            out["tool_errors"] = 1.0
            out[f"tool_errors:{name}"] = 1.0
        return out


@dataclass(frozen=True, slots=True)
class DayAggregate:
    tenant: str
    day: str
    values: dict[str, float]

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)


class Ledger(Protocol):
    async def record(self, event: SpendEvent) -> None: ...

    async def events(
        self, start_ts: float, end_ts: float, limit: int = 10_000
    ) -> list[SpendEvent]: ...

    async def daily(self, tenants: Iterable[str], start: date, end: date) -> list[DayAggregate]: ...


class MemoryLedger:
    """Single-process ledger with the same contract, in bounded memory: per-day aggregates
    (every request is counted there) for ``retention_days``, and only the newest
    ``max_events`` events themselves (the dashboard reads a few hundred)."""

    def __init__(self, *, max_events: int = 10_000, retention_days: int = 400) -> None:
        self.max_events = max_events
        self.retention_days = retention_days
        self._events: deque[SpendEvent] = deque(maxlen=max_events)
        self._aggregates: dict[tuple[str, str], dict[str, float]] = {}
        self._newest_day = ""

    async def record(self, event: SpendEvent) -> None:
        self._events.append(event)
        day = day_of(event.ts)
        if day > self._newest_day:  # a new day: drop the days past retention
            self._newest_day = day
            oldest = (date.fromisoformat(day) - timedelta(days=self.retention_days)).isoformat()
            for key in [k for k in self._aggregates if k[1] < oldest]:
                del self._aggregates[key]
        values = self._aggregates.setdefault((event.tenant, day), {})
        for name, amount in event.increments().items():
            values[name] = values.get(name, 0.0) + amount

    async def events(self, start_ts: float, end_ts: float, limit: int = 10_000) -> list[SpendEvent]:
        found = sorted((e for e in self._events if start_ts <= e.ts <= end_ts), key=lambda e: e.ts)
        return found[-limit:]

    async def daily(self, tenants: Iterable[str], start: date, end: date) -> list[DayAggregate]:
        return [
            DayAggregate(tenant, day, dict(self._aggregates[(tenant, day)]))
            for tenant in tenants
            for day in days_between(start, end)
            if (tenant, day) in self._aggregates
        ]


def now() -> float:
    return time.time()


TRUNCATED = "tiergate_truncated"  # the key a trimmed ``metadata`` says so under


def bounded_metadata(metadata: Mapping[str, str] | None, limit: int) -> Mapping[str, str] | None:
    """The client's ``metadata`` as one ledger event keeps it: the pairs, in order, while
    their JSON stays within ``limit`` bytes; when some are dropped, ``TRUNCATED`` says how
    many were kept (16 maximal pairs are ~10 kB: the stream keeps a million events)."""
    if not metadata or len(orjson.dumps(metadata)) <= limit:
        return metadata
    kept: dict[str, str] = {}
    note = f"kept 0 of {len(metadata)} pairs ({limit} bytes)"
    for key, value in metadata.items():
        trial = {**kept, key: value}
        trial_note = f"kept {len(trial)} of {len(metadata)} pairs ({limit} bytes)"
        if len(orjson.dumps({**trial, TRUNCATED: trial_note})) > limit:
            break
        kept, note = trial, trial_note
    return {**kept, TRUNCATED: note}
