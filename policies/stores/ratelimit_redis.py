"""Sliding-log rate limits on Redis: one Lua script checks and records every scope.

Keys (``P`` = ``<redis_prefix>:{rate}``: one hash tag, so one script may touch a tenant's
and its key's scopes on a cluster), per scope:
  P:NAME:req     zset request id by admission time (ms)
  P:NAME:tok     zset "request id:tokens" by admission time (ms)
  P:NAME:toksum  the sum of the tokens in ``tok``
All three expire one window after their newest entry. Time is the server's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.stores.ratelimit import WINDOW_S, RateDecision, RateScope, RateWindow, tightest
from policies.stores.store_redis import RedisStore

# ARGV: rid window_ms tokens nscopes (rpm tpm)...   KEYS: (req tok toksum) per scope
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rid, window, tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cutoff = now - window
local n = tonumber(ARGV[4])
local allowed, retry, refused = 1, 0, 0
local out = {}
local function count_of(member) return tonumber(string.match(member, ':(%d+)$')) end
for s = 1, n do
  local rk, tk, sk = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
  local rpm, tpm = tonumber(ARGV[3 + 2 * s]), tonumber(ARGV[4 + 2 * s])
  local used_r, reset_r, used_t, reset_t = 0, 0, 0, 0
  if rpm > 0 then
    redis.call('ZREMRANGEBYSCORE', rk, '-inf', cutoff)
    used_r = redis.call('ZCARD', rk)
    if used_r + 1 > rpm then
      allowed, refused = 0, s
      local e = redis.call('ZRANGE', rk, used_r - rpm, used_r - rpm, 'WITHSCORES')
      retry = math.max(retry, tonumber(e[2]) + window - now)
    end
    local first = redis.call('ZRANGE', rk, 0, 0, 'WITHSCORES')
    if #first > 0 then reset_r = tonumber(first[2]) + window - now end
  end
  if tpm > 0 then
    local old = redis.call('ZRANGEBYSCORE', tk, '-inf', cutoff)
    if #old > 0 then
      local freed = 0
      for _, m in ipairs(old) do freed = freed + count_of(m) end
      redis.call('DECRBY', sk, freed)
      redis.call('ZREMRANGEBYSCORE', tk, '-inf', cutoff)
    end
    used_t = tonumber(redis.call('GET', sk) or '0')
    local entries = redis.call('ZRANGE', tk, 0, -1, 'WITHSCORES')
    if #entries > 0 then reset_t = tonumber(entries[2]) + window - now end
    if used_t + tokens > tpm then
      allowed, refused = 0, s
      local wait = window
      if tokens <= tpm then
        local need, freed = used_t + tokens - tpm, 0
        for j = 1, #entries, 2 do
          freed = freed + count_of(entries[j])
          if freed >= need then
            wait = tonumber(entries[j + 1]) + window - now
            break
          end
        end
      end
      retry = math.max(retry, wait)
    end
  end
  out[#out + 1] = used_r
  out[#out + 1] = reset_r
  out[#out + 1] = used_t
  out[#out + 1] = reset_t
end
if allowed == 1 then
  for s = 1, n do
    local rk, tk, sk = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
    if tonumber(ARGV[3 + 2 * s]) > 0 then
      redis.call('ZADD', rk, now, rid)
      redis.call('PEXPIRE', rk, window)
    end
    if tonumber(ARGV[4 + 2 * s]) > 0 then
      redis.call('ZADD', tk, now, rid .. ':' .. tokens)
      redis.call('INCRBY', sk, tokens)
      redis.call('PEXPIRE', tk, window)
      redis.call('PEXPIRE', sk, window)
    end
  end
end
return {allowed, refused, retry, out}
"""


# KEYS: (tok toksum) per scope   ARGV: rid estimated actual
_CORRECT = """
local old = ARGV[1] .. ':' .. ARGV[2]
for s = 1, #KEYS / 2 do
  local tk, sk = KEYS[2 * s - 1], KEYS[2 * s]
  local at = redis.call('ZSCORE', tk, old)
  if at then
    redis.call('ZREM', tk, old)
    redis.call('ZADD', tk, at, ARGV[1] .. ':' .. ARGV[3])
    redis.call('INCRBY', sk, tonumber(ARGV[3]) - tonumber(ARGV[2]))
  end
end
return 1
"""


class RedisRateLimiter:
    def __init__(self, store: RedisStore, *, window_s: float = WINDOW_S) -> None:
        self.store = store
        self.base = store.keys("rate")
        self.window_ms = int(window_s * 1000)
        self._acquire = store.script(_ACQUIRE)
        self._correct = store.script(_CORRECT)

    async def correct(
        self, request_id: str, scopes: Sequence[RateScope], estimated: int, actual: int
    ) -> None:
        keys: list[str] = []
        for scope in scopes:
            if scope.spec.tokens_per_minute is not None:
                keys += [f"{self.base}:{scope.name}:tok", f"{self.base}:{scope.name}:toksum"]
        if not keys or estimated == actual:
            return
        await self._correct("rate limit correct", keys, [request_id, estimated, actual])

    async def acquire(
        self, request_id: str, scopes: Sequence[RateScope], tokens: int
    ) -> RateDecision:
        keys: list[str] = []
        argv: list[Any] = [request_id, self.window_ms, tokens, len(scopes)]
        for scope in scopes:
            base = f"{self.base}:{scope.name}"
            keys += [f"{base}:req", f"{base}:tok", f"{base}:toksum"]
            argv += [scope.spec.requests_per_minute or 0, scope.spec.tokens_per_minute or 0]
        reply = await self._acquire("rate limit acquire", keys, argv)
        allowed, refused, retry_ms, per_scope = int(reply[0]), int(reply[1]), reply[2], reply[3]
        req_windows: list[RateWindow] = []
        tok_windows: list[RateWindow] = []
        for i, scope in enumerate(scopes):
            used_r, reset_r, used_t, reset_t = (int(x) for x in per_scope[4 * i : 4 * i + 4])
            rpm, tpm = scope.spec.requests_per_minute, scope.spec.tokens_per_minute
            if rpm is not None:
                req_windows.append(RateWindow(rpm, rpm - used_r - 1, reset_r / 1000))
            if tpm is not None:
                tok_windows.append(RateWindow(tpm, tpm - used_t - tokens, reset_t / 1000))
        return RateDecision(
            allowed=bool(allowed),
            retry_after_s=int(retry_ms) / 1000,
            refused_by=scopes[refused - 1].name if refused else None,
            requests=tightest(req_windows),
            tokens=tightest(tok_windows),
        )
