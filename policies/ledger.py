"""The spend ledger: one event per settled request, plus per-tenant per-day aggregates.

The dashboard and the admin API read this. On Redis, an event and its aggregate
increments are written in one script, so the aggregates always sum to the stream.
Durability is Redis's: run it with AOF (``appendonly yes``, ``appendfsync everysec``,
as docker-compose.yml does). The stream keeps the newest ``max_events`` events
(approximate trim); daily aggregates expire after ``retention_days``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Iterable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol, TypeVar

from policies.latency_buckets import bucket_of
from policies.store import MemoryStore, RedisStore, Store, StoreUnavailable

T = TypeVar("T")

# One hash tag: every ledger key lives in one Redis Cluster slot, so MULTI works.
PREFIX = "tg:{ledger}"
EVENTS_KEY = f"{PREFIX}:events"
CLOCK_SLACK_S = 60.0


def day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def days_between(start: date, end: date) -> list[str]:
    return [(start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]


@dataclass(frozen=True, slots=True)
class SpendEvent:
    """One settled request (``kind="request"``) or one refused one (``kind="denied"``)."""

    ts: float
    request_id: str
    tenant: str
    key_id: str
    tier: str
    model: str
    kind: str = "request"  # request | denied
    status: str = "ok"  # ok | error | cancelled | budget | rate_limit
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

    def to_fields(self) -> dict[str, str]:
        return {k: str(int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> SpendEvent:
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in raw:
                continue
            text = raw[f.name]
            kind = f.type if isinstance(f.type, str) else f.type.__name__
            if kind == "bool":
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


# The stream id carries the event's time, so a time window is an id range. Replicas'
# clocks differ a little: an event older than the stream's newest id is stored with an
# id of "now" instead (``events`` reads with a minute of slack and filters on ``ts``).
# A Lua function, so the budget's settle script can write its event in the same call.
# ARGV from ``first``: max_events, ts_ms, retention_s, n, n field words, increment pairs.
RECORD_FUNCTION = """
local function record_event(events_key, agg_key, first)
  local n = tonumber(ARGV[first + 3])
  local fields = {}
  for i = first + 4, first + 3 + n do fields[#fields + 1] = ARGV[i] end
  local id = ARGV[first + 1] .. '-*'
  local ok = redis.pcall('XADD', events_key, 'MAXLEN', '~', ARGV[first], id, unpack(fields))
  if type(ok) == 'table' and ok.err then
    redis.call('XADD', events_key, 'MAXLEN', '~', ARGV[first], '*', unpack(fields))
  end
  for i = first + 4 + n, #ARGV, 2 do
    redis.call('HINCRBYFLOAT', agg_key, ARGV[i], ARGV[i + 1])
  end
  redis.call('EXPIRE', agg_key, ARGV[first + 2])
end
"""

_RECORD = RECORD_FUNCTION + "record_event(KEYS[1], KEYS[2], 1)\nreturn 1\n"


def ledger_prefix(redis_prefix: str) -> str:
    """The ledger's keys (and the budget keys that settle with it) share one hash tag."""
    return f"{redis_prefix}:{{ledger}}"


class RedisLedger:
    def __init__(
        self,
        store: RedisStore,
        *,
        prefix: str | None = None,
        max_events: int = 1_000_000,
        retention_days: int = 400,
    ) -> None:
        self.redis = store.redis
        self.prefix = prefix or PREFIX
        self.events_key = f"{self.prefix}:events"
        self.max_events = max_events
        self.retention_s = retention_days * 86_400

    def agg_key(self, tenant: str, day: str) -> str:
        return f"{self.prefix}:agg:{tenant}:{day}"

    def record_keys(self, event: SpendEvent) -> list[str]:
        return [self.events_key, self.agg_key(event.tenant, day_of(event.ts))]

    def record_argv(self, event: SpendEvent) -> list[str | int]:
        event_fields = [x for pair in event.to_fields().items() for x in pair]
        increments = [str(x) for pair in event.increments().items() for x in pair]
        head: list[str | int] = [
            self.max_events,
            int(event.ts * 1000),
            self.retention_s,
            len(event_fields),
        ]
        return [*head, *event_fields, *increments]

    async def _call(self, what: str, work: Awaitable[T]) -> T:
        from redis.exceptions import ConnectionError, TimeoutError

        try:
            return await work
        except (ConnectionError, TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"ledger {what}: {exc}") from exc

    async def record(self, event: SpendEvent) -> None:
        """One script: the event and its aggregate increments land together or not at all."""
        keys, argv = self.record_keys(event), self.record_argv(event)
        await self._call("record", self.redis.eval(_RECORD, 2, *keys, *argv))

    async def events(self, start_ts: float, end_ts: float, limit: int = 10_000) -> list[SpendEvent]:
        """The newest ``limit`` events in the window, oldest first."""
        rows: list[tuple[bytes, dict[bytes, bytes]]] = await self._call(
            "read",
            self.redis.xrevrange(  # type: ignore[arg-type]
                self.events_key,
                max=str(int((end_ts + CLOCK_SLACK_S) * 1000)),
                min=str(max(int((start_ts - CLOCK_SLACK_S) * 1000), 0)),
                count=limit,
            ),
        )
        decoded = (
            SpendEvent.from_fields({k.decode(): v.decode() for k, v in raw.items()})
            for _, raw in rows
        )
        found = sorted((e for e in decoded if start_ts <= e.ts <= end_ts), key=lambda e: e.ts)
        return found[-limit:]

    async def daily(self, tenants: Iterable[str], start: date, end: date) -> list[DayAggregate]:
        pairs = [(t, d) for t in tenants for d in days_between(start, end)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, day in pairs:
                pipe.hgetall(self.agg_key(tenant, day))
            results = await self._call("read", pipe.execute())
        return [
            DayAggregate(tenant, day, {k.decode(): float(v) for k, v in raw.items()})
            for (tenant, day), raw in zip(pairs, results, strict=True)
            if raw
        ]


class MemoryLedger:
    """Single-process ledger with the same contract."""

    def __init__(self, *, max_events: int = 100_000) -> None:
        self.max_events = max_events
        self._events: list[SpendEvent] = []
        self._aggregates: dict[tuple[str, str], dict[str, float]] = {}

    async def record(self, event: SpendEvent) -> None:
        self._events.append(event)
        del self._events[: max(len(self._events) - self.max_events, 0)]
        values = self._aggregates.setdefault((event.tenant, day_of(event.ts)), {})
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


def open_ledger(store: Store, redis_prefix: str = "tg") -> Ledger:
    if isinstance(store, RedisStore):
        return RedisLedger(store, prefix=ledger_prefix(redis_prefix))
    assert isinstance(store, MemoryStore)
    return MemoryLedger()


def now() -> float:
    return time.time()
