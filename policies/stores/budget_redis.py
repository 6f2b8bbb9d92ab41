"""The budget store on Redis: reserve and settle are one Lua script each.

Every key shares the ledger's hash tag, so on Redis Cluster one script can check all
scopes (global, tenant, key), hold the money and (at settle) append the spend event
atomically; the price is that all budget traffic lands on one cluster node (see
docs/redis-keys.md). Time comes from the server (``TIME``): hold deadlines and the
day / month a reservation counts against, so replicas with skewed clocks agree and
cannot spend a daily cap twice around midnight.

Keys (``P`` = ``<redis_prefix>:{ledger}:budget``):
  P:limits     hash  scope -> "nano window" runtime overrides ("- total": uncapped)
  P:spent      hash  scope|window -> settled nano-USD
  P:held       hash  scope|window -> nano-USD held by live reservations
  P:holds      hash  request id -> "amount<TAB>choice<TAB>field<TAB>field..."
  P:deadlines  zset  request id by expiry (ms): every call purges what has lapsed
  P:settled    zset  request id by settle time (ms), kept one TTL: a second settle is a no-op
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.schema import BudgetSpec
from policies.stores.budget import (
    Denied,
    Reservation,
    Scope,
    ScopeStatus,
    decode_limit,
    encode_limit,
    to_nano,
    to_usd,
    window_field,
)
from policies.stores.ledger import SpendEvent
from policies.stores.ledger_redis import RECORD_FUNCTION, RedisLedger

PURGE_BATCH = 256

# The UTC calendar date of a count of days since 1970-01-01 (H. Hinnant's algorithm).
CALENDAR = """
local function civil(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end
"""

_COMMON = (
    CALENDAR
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local year, month, mday = civil(math.floor(tonumber(t[1]) / 86400))
local day_id = string.format('d:%04d-%02d-%02d', year, month, mday)
local month_id = string.format('m:%04d-%02d', year, month)

local function split(text)
  local parts = {}
  for part in string.gmatch(text, '[^\\t]+') do parts[#parts + 1] = part end
  return parts
end

local function release(held, holds, deadlines, rid)
  local detail = redis.call('HGET', holds, rid)
  redis.call('ZREM', deadlines, rid)
  if not detail then return end
  local parts = split(detail)
  for i = 3, #parts do
    local left = redis.call('HINCRBY', held, parts[i], -tonumber(parts[1]))
    if left <= 0 then redis.call('HDEL', held, parts[i]) end
  end
  redis.call('HDEL', holds, rid)
end

local function purge(held, holds, deadlines)
  local lapsed = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now, 'LIMIT', 0, PURGE_BATCH)
  for _, rid in ipairs(lapsed) do release(held, holds, deadlines, rid) end
end
""".replace("PURGE_BATCH", str(PURGE_BATCH))
)

# KEYS: limits spent held holds deadlines
# ARGV: rid ttl_ms ncand cand... nscopes (name limit_nano window)...
_RESERVE = (
    _COMMON
    + """
purge(KEYS[3], KEYS[4], KEYS[5])
local rid = ARGV[1]
local existing = redis.call('HGET', KEYS[4], rid)
if existing then
  local parts = split(existing)
  return {1, tonumber(parts[2]), parts[1], table.concat(parts, '\\t', 3)}
end
local ncand = tonumber(ARGV[3])
local i = 4 + ncand
local nscopes = tonumber(ARGV[i])
i = i + 1
local fields = {}
local best = nil
local unheld = nil
local binding = ''
for s = 1, nscopes do
  local name, limit, window = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  local override = redis.call('HGET', KEYS[1], name)
  if override then
    local sp = string.find(override, ' ', 1, true)
    limit = string.sub(override, 1, sp - 1)
    window = string.sub(override, sp + 1)
  end
  local wid = 'total'
  if window == 'daily' then wid = day_id elseif window == 'monthly' then wid = month_id end
  local field = name .. '|' .. wid
  fields[#fields + 1] = field
  if limit ~= '-' then
    local spent = tonumber(redis.call('HGET', KEYS[2], field) or '0')
    local held = tonumber(redis.call('HGET', KEYS[3], field) or '0')
    local left = tonumber(limit) - spent - held
    if best == nil or left < best then
      best = left
      binding = name
    end
    if unheld == nil or tonumber(limit) - spent < unheld then unheld = tonumber(limit) - spent end
  end
end
for c = 1, ncand do
  local amount = ARGV[3 + c]
  if best == nil or tonumber(amount) <= best then
    for _, f in ipairs(fields) do redis.call('HINCRBY', KEYS[3], f, amount) end
    local joined = table.concat(fields, '\\t')
    redis.call('HSET', KEYS[4], rid, amount .. '\\t' .. (c - 1) .. '\\t' .. joined)
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), rid)
    return {1, c - 1, amount, joined}
  end
end
return {0, binding, tostring(best), tostring(unheld)}
"""
)

# KEYS: spent held holds deadlines settled events agg
# ARGV: rid cost_nano nfields field... has_event [ledger args...]
_SETTLE = (
    _COMMON
    + RECORD_FUNCTION
    + """
local rid = ARGV[1]
local already = redis.call('ZSCORE', KEYS[5], rid)
release(KEYS[2], KEYS[3], KEYS[4], rid)
if already then return 0 end
purge(KEYS[2], KEYS[3], KEYS[4])
local n = tonumber(ARGV[3])
for i = 4, 3 + n do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[2]) end
redis.call('ZADD', KEYS[5], now, rid)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - KEEP_MS)
if ARGV[4 + n] == '1' then record_event(KEYS[6], KEYS[7], 5 + n) end
return 1
"""
)

# KEYS: limits spent settled events agg
# ARGV: rid cost_nano nscopes (name window)... has_event [ledger args...]
_CHARGE = (
    _COMMON
    + RECORD_FUNCTION
    + """
local rid = ARGV[1]
if redis.call('ZSCORE', KEYS[3], rid) then return 0 end
local i = 4
for s = 1, tonumber(ARGV[3]) do
  local name, window = ARGV[i], ARGV[i + 1]
  i = i + 2
  local override = redis.call('HGET', KEYS[1], name)
  if override then window = string.sub(override, string.find(override, ' ', 1, true) + 1) end
  local wid = 'total'
  if window == 'daily' then wid = day_id elseif window == 'monthly' then wid = month_id end
  redis.call('HINCRBY', KEYS[2], name .. '|' .. wid, ARGV[2])
end
redis.call('ZADD', KEYS[3], now, rid)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - KEEP_MS)
if ARGV[i] == '1' then record_event(KEYS[4], KEYS[5], i + 1) end
return 1
"""
)

# KEYS: holds deadlines   ARGV: rid ttl_ms
_EXTEND = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local deadline = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not deadline or tonumber(deadline) <= now then return 0 end
redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[2]), ARGV[1])
return 1
"""

# KEYS: held holds deadlines
_PURGE = _COMMON + "purge(KEYS[1], KEYS[2], KEYS[3])\nreturn redis.call('ZCARD', KEYS[3])\n"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisBudgetStore:
    def __init__(self, ledger: RedisLedger, *, ttl_s: float = 120.0) -> None:
        self.ledger = ledger
        self.store = ledger.store
        self.ttl_ms = max(int(ttl_s * 1000), 1)
        # The ledger's hash tag: settle appends the spend event in the same script.
        base = self.store.keys("budget", tag="ledger")
        self.limits_key = f"{base}:limits"
        self.spent_key = f"{base}:spent"
        self.held_key = f"{base}:held"
        self.holds_key = f"{base}:holds"
        self.deadlines_key = f"{base}:deadlines"
        self.settled_key = f"{base}:settled"
        self._reserve = self.store.script(_RESERVE)
        # Settled ids are kept one TTL (a retried or late settle is a no-op), no longer.
        self._settle = self.store.script(_SETTLE.replace("KEEP_MS", str(self.ttl_ms)))
        self._charge = self.store.script(_CHARGE.replace("KEEP_MS", str(self.ttl_ms)))
        self._purge = self.store.script(_PURGE)
        self._extend = self.store.script(_EXTEND)

    async def reserve(
        self, request_id: str, scopes: Sequence[Scope], candidates_usd: Sequence[float]
    ) -> Reservation | Denied:
        candidates = [str(to_nano(c)) for c in candidates_usd]
        scope_args: list[str] = []
        for scope in scopes:
            encoded = encode_limit(scope.limit).split(" ")
            scope_args += [scope.name, encoded[0], encoded[1]]
        argv: list[str | int] = [request_id, self.ttl_ms, len(candidates)]
        argv += [*candidates, len(scopes), *scope_args]
        keys = [
            self.limits_key,
            self.spent_key,
            self.held_key,
            self.holds_key,
            self.deadlines_key,
        ]
        reply = await self._reserve("budget reserve", keys, argv)
        if int(reply[0]) == 1:
            fields = _text(reply[3])
            return Reservation(
                request_id=request_id,
                amount_usd=to_usd(int(_text(reply[2]))),
                choice=int(reply[1]),
                fields=tuple(fields.split("\t")) if fields else (),
            )
        remaining = _text(reply[2])
        unheld = _text(reply[3]) if len(reply) > 3 else "nil"
        return Denied(
            scope=_text(reply[1]),
            remaining_usd=to_usd(float(remaining)) if remaining != "nil" else 0.0,
            needed_usd=min(candidates_usd),
            unheld_usd=to_usd(float(unheld)) if unheld != "nil" else None,
        )

    async def settle(
        self, reservation: Reservation, cost_usd: float, event: SpendEvent | None = None
    ) -> bool:
        keys = [
            self.spent_key,
            self.held_key,
            self.holds_key,
            self.deadlines_key,
            self.settled_key,
        ]
        argv: list[str | int] = [
            reservation.request_id,
            to_nano(cost_usd),
            len(reservation.fields),
            *reservation.fields,
        ]
        if event is None:
            keys += [self.ledger.events_key, self.ledger.events_key]
            argv.append("0")
        else:
            keys += self.ledger.record_keys(event)
            argv += ["1", *self.ledger.record_argv(event)]
        return bool(await self._settle("budget settle", keys, argv))

    async def charge(
        self,
        request_id: str,
        scopes: Sequence[Scope],
        cost_usd: float,
        event: SpendEvent | None = None,
    ) -> bool:
        keys = [self.limits_key, self.spent_key, self.settled_key]
        argv: list[str | int] = [request_id, to_nano(cost_usd), len(scopes)]
        for scope in scopes:
            argv += [scope.name, "total" if scope.limit is None else scope.limit.window]
        if event is None:
            keys += [self.ledger.events_key, self.ledger.events_key]
            argv.append("0")
        else:
            keys += self.ledger.record_keys(event)
            argv += ["1", *self.ledger.record_argv(event)]
        return bool(await self._charge("budget charge", keys, argv))

    async def extend(self, reservation: Reservation) -> bool:
        keys = [self.holds_key, self.deadlines_key]
        args: list[str | int] = [reservation.request_id, self.ttl_ms]
        return bool(await self._extend("budget extend", keys, args))

    async def status(self, scopes: Sequence[Scope]) -> list[ScopeStatus]:
        await self.active_holds()
        client = self.store.client
        overrides = await self.store.call("budget status", client.hgetall, self.limits_key)
        by_scope = {_text(k): decode_limit(_text(v)) for k, v in overrides.items()}
        ts = await self.store.server_time()  # the same clock reserve windows come from
        resolved: list[tuple[Scope, BudgetSpec | None, bool, str]] = []
        for scope in scopes:
            overridden = scope.name in by_scope
            limit = by_scope[scope.name] if overridden else scope.limit
            window = limit.window if limit is not None else "total"
            resolved.append((scope, limit, overridden, window_field(scope.name, window, ts)))
        fields = [r[3] for r in resolved]
        if not fields:
            return []
        spent = await self.store.call("budget status", client.hmget, self.spent_key, fields)
        held = await self.store.call("budget status", client.hmget, self.held_key, fields)
        return [
            ScopeStatus(
                scope=scope.name,
                limit_usd=None if limit is None else to_usd(to_nano(limit.limit_usd)),
                window="total" if limit is None else limit.window,
                spent_usd=to_usd(int(s or 0)),
                held_usd=to_usd(int(h or 0)),
                overridden=overridden,
            )
            for (scope, limit, overridden, _), s, h in zip(resolved, spent, held, strict=True)
        ]

    async def set_limit(self, scope: str, limit: BudgetSpec | None) -> None:
        client = self.store.client
        await self.store.call(
            "budget set", client.hset, self.limits_key, scope, encode_limit(limit)
        )

    async def clear_limit(self, scope: str) -> None:
        await self.store.call("budget clear", self.store.client.hdel, self.limits_key, scope)

    async def active_holds(self) -> int:
        keys = [self.held_key, self.holds_key, self.deadlines_key]
        return int(await self._purge("budget purge", keys))
