"""The spend ledger on Redis: a stream of events and per-tenant per-day aggregate hashes.

An event and its aggregate increments are written by one script, so the aggregates
always sum to the stream. Every key carries the ``{ledger}`` hash tag (one cluster
slot), so the budget's settle script can append its event in the same call.
Durability is Redis's: run it with AOF (``appendonly yes``, ``appendfsync everysec``,
as docker-compose.yml does). The stream keeps the newest ``max_events`` events
(approximate trim); daily aggregates expire after ``retention_days``.

Keys (``P`` = ``<redis_prefix>:{ledger}``):
  P:events              stream  one entry per settled or refused request
  P:agg:TENANT:DAY      hash    the day's sums (requests, cost, tokens, per tier/model...)
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from policies.stores.ledger import DayAggregate, SpendEvent, day_of, days_between
from policies.stores.store_redis import RedisStore

CLOCK_SLACK_S = 60.0

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


class RedisLedger:
    def __init__(
        self, store: RedisStore, *, max_events: int = 1_000_000, retention_days: int = 400
    ) -> None:
        self.store = store
        self.prefix = store.keys("ledger")
        self.events_key = f"{self.prefix}:events"
        self.max_events = max_events
        self.retention_s = retention_days * 86_400
        self._record = store.script(_RECORD)

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

    async def record(self, event: SpendEvent) -> None:
        """One script: the event and its aggregate increments land together or not at all."""
        await self._record("ledger record", self.record_keys(event), self.record_argv(event))

    async def events(self, start_ts: float, end_ts: float, limit: int = 10_000) -> list[SpendEvent]:
        """The newest ``limit`` events in the window, oldest first."""
        rows: list[tuple[bytes, dict[bytes, bytes]]] = await self.store.call(
            "ledger read",
            self.store.client.xrevrange,
            self.events_key,
            max=str(int((end_ts + CLOCK_SLACK_S) * 1000)),
            min=str(max(int((start_ts - CLOCK_SLACK_S) * 1000), 0)),
            count=limit,
        )
        decoded = (
            SpendEvent.from_fields({k.decode(): v.decode() for k, v in raw.items()})
            for _, raw in rows
        )
        found = sorted((e for e in decoded if start_ts <= e.ts <= end_ts), key=lambda e: e.ts)
        return found[-limit:]

    async def daily(self, tenants: Iterable[str], start: date, end: date) -> list[DayAggregate]:
        pairs = [(t, d) for t in tenants for d in days_between(start, end)]

        async def read() -> list[Any]:
            async with self.store.client.pipeline(transaction=False) as pipe:
                for tenant, day in pairs:
                    pipe.hgetall(self.agg_key(tenant, day))
                found: list[Any] = await pipe.execute()
                return found

        results = await self.store.call("ledger read", read)
        return [
            DayAggregate(tenant, day, {k.decode(): float(v) for k, v in raw.items()})
            for (tenant, day), raw in zip(pairs, results, strict=True)
            if raw
        ]
