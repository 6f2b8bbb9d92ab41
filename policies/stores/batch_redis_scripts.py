"""The Lua scripts of the batch store on Redis (``policies/stores/batch_redis.py``), each
run in one tenant's slot (``{batch:TENANT}``): a file and the tenant's byte count, a
batch and its lines, a line's result and its batch's counts, a status move.

Over each script, the keys (``KEYS``) and arguments (``ARGV``) it takes, in order.
"""

from __future__ import annotations

# KEYS: usage files f blob expiry   ARGV: id limit bytes created expires has_blob blob fields…
ADD_FILE = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
local used = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
if used + tonumber(ARGV[3]) > tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'bytes', ARGV[3])
redis.call('ZADD', KEYS[2], redis.call('HINCRBY', KEYS[1], 'seq', 1), ARGV[1])
for i = 8, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
if ARGV[6] == '1' then redis.call('SET', KEYS[4], ARGV[7]) end
if ARGV[5] ~= '' then redis.call('ZADD', KEYS[5], ARGV[5], 'f:' .. ARGV[1]) end
return 1
"""

# KEYS: usage files f blob expiry   ARGV: id
REMOVE_FILE = """
local record = redis.call('HGETALL', KEYS[3])
if #record == 0 then return record end
redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(redis.call('HGET', KEYS[3], 'bytes')))
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[5], 'f:' .. ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4])
return record
"""

# KEYS: usage batches b   ARGV: id created max_open max_lines total fields…
ADD_BATCH = """
local open = tonumber(redis.call('HGET', KEYS[1], 'open') or '0')
local lines = tonumber(redis.call('HGET', KEYS[1], 'lines') or '0')
if open + 1 > tonumber(ARGV[3]) then return 'open_batches' end
if lines + tonumber(ARGV[5]) > tonumber(ARGV[4]) then return 'lines' end
redis.call('HINCRBY', KEYS[1], 'open', 1)
redis.call('HINCRBY', KEYS[1], 'lines', ARGV[5])
redis.call('ZADD', KEYS[2], redis.call('HINCRBY', KEYS[1], 'seq', 1), ARGV[1])
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
return 'ok'
"""

# Writes one result unless the line has one; counts it on the batch. Shared by scripts.
FINISH_FUNCTION = """
local function finish(b, input, res, index, value, count, cost, saved, p, c, cached)
  if redis.call('HSETNX', res, index, value) == 0 then return 0 end
  redis.call('HDEL', input, index)
  redis.call('HINCRBY', b, count, 1)
  redis.call('HINCRBY', b, 'cost_nano', cost)
  redis.call('HINCRBY', b, 'saved_nano', saved)
  redis.call('HINCRBY', b, 'prompt_tokens', p)
  redis.call('HINCRBY', b, 'completion_tokens', c)
  redis.call('HINCRBY', b, 'cached_tokens', cached)
  return 1
end
local function all_done(b)
  local v = redis.call('HMGET', b, 'total', 'completed', 'failed', 'cancelled', 'expired')
  local done = 0
  for i = 2, 5 do done = done + tonumber(v[i] or '0') end
  return done >= tonumber(v[1] or '0')
end
"""

# KEYS: b in res   ARGV: index value count cost saved prompt completion cached
FINISH = (
    FINISH_FUNCTION
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local written = finish(KEYS[1], KEYS[2], KEYS[3], unpack(ARGV, 1, 8))
return {written, all_done(KEYS[1]) and 1 or 0}
"""
)

# KEYS: b in res   ARGV: (index value count)...  (lines that will not run, at creation)
ADD_RESULTS = (
    FINISH_FUNCTION
    + """
for i = 1, #ARGV, 3 do
  finish(KEYS[1], KEYS[2], KEYS[3], ARGV[i], ARGV[i + 1], ARGV[i + 2], 0, 0, 0, 0, 0)
end
return 1
"""
)

# KEYS: b in res   ARGV: index
TAKE = """
local record = redis.call('HGETALL', KEYS[1])
if #record == 0 then return {'gone'} end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return {'done', '', record} end
local line = redis.call('HGET', KEYS[2], ARGV[1])
if not line then return {'gone', '', record} end
return {'run', line, record}
"""

# KEYS: b usage expiry   ARGV: id sources to at keep_s ended changes…
MOVE = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {0, {}} end
local allowed = false
for source in string.gmatch(ARGV[2], '[^,]+') do
  if source == status then allowed = true end
end
if allowed then
  redis.call('HSET', KEYS[1], 'status', ARGV[3], ARGV[3] .. '_at', ARGV[4])
  for i = 7, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
  if ARGV[6] == '1' then
    redis.call('HSET', KEYS[1], 'ended_at', ARGV[4])
    redis.call('HINCRBY', KEYS[2], 'open', -1)
    redis.call('HINCRBY', KEYS[2], 'lines', -tonumber(redis.call('HGET', KEYS[1], 'total')))
    redis.call('ZADD', KEYS[3], tonumber(ARGV[4]) + tonumber(ARGV[5]), 'b:' .. ARGV[1])
  end
end
return {allowed and 1 or 0, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: usage batches b in res expiry   ARGV: id ended...
REMOVE_BATCH = """
local status = redis.call('HGET', KEYS[3], 'status')
if not status then return 0 end
local ended = false
for e in string.gmatch(ARGV[2], '[^,]+') do if e == status then ended = true end end
if not ended then
  redis.call('HINCRBY', KEYS[1], 'open', -1)
  redis.call('HINCRBY', KEYS[1], 'lines', -tonumber(redis.call('HGET', KEYS[3], 'total')))
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[6], 'b:' .. ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
return 1
"""
