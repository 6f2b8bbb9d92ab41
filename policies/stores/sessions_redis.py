"""Agent sessions in Redis (``policies/stores/sessions.py`` says what a session holds).

Every key carries the ``{session}`` hash tag, so a turn's write (the state, the order of
use, the request's index, and the eviction beyond ``max_sessions``) is one script in one
cluster slot:

* ``P:{session}:s:ID``: hash ``state`` / ``signal`` / ``replica``, expiring ``ttl_s``
  after the last turn;
* ``P:{session}:order``: zset session id → server ms of its last turn (the bound);
* ``P:{session}:r:REQUEST_ID``: string, the request's session id, expiring with it;
* ``P:{session}:requests``: zset request id → server ms of its turn: at most
  ``max_sessions x REQUESTS_PER_SESSION`` indexed requests, the oldest unlinked
  beyond that (as the in-process store keeps them).
"""

from __future__ import annotations

from policies.stores.sessions import FIELDS, REQUESTS_PER_SESSION
from policies.stores.store_redis import RedisStore

# KEYS: session hash, order, request index, requests.  ARGV: session id, state, consumed
# signal ("" for none), ttl ms, max sessions, session key prefix, request id, max requests,
# request key prefix.
WRITE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, ttl, cap, prefix = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
redis.call('HSET', KEYS[1], 'state', ARGV[2])
if ARGV[3] ~= '' and redis.call('HGET', KEYS[1], 'signal') == ARGV[3] then
  redis.call('HDEL', KEYS[1], 'signal')
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[3], id, 'PX', ttl)
redis.call('ZADD', KEYS[2], now, id)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local over = redis.call('ZCARD', KEYS[2]) - cap
if over > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #popped, 2 do redis.call('UNLINK', prefix .. popped[i]) end
end
redis.call('ZADD', KEYS[4], now, ARGV[7])
redis.call('PEXPIRE', KEYS[4], ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - ttl)
local extra = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[8])
if extra > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[4], extra)
  for i = 1, #popped, 2 do redis.call('UNLINK', ARGV[9] .. popped[i]) end
end
return 1
"""

# KEYS: session hash.  ARGV: field, value.  Only on a session that exists.
NOTE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


class RedisSessionStore:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.prefix = store.keys("session")
        self._write = store.script(WRITE_SCRIPT)
        self._note = store.script(NOTE_SCRIPT)

    def _session(self, session: str) -> str:
        return f"{self.prefix}:s:{session}"

    async def read(self, session: str) -> dict[str, bytes]:
        found = await self.store.hgetall(self._session(session))
        return {k: v for k, v in found.items() if k in FIELDS}

    async def write(
        self,
        session: str,
        state: bytes,
        request_id: str,
        consumed: bytes | None,
        ttl_s: float,
        max_sessions: int,
    ) -> None:
        keys = [
            self._session(session),
            f"{self.prefix}:order",
            f"{self.prefix}:r:{request_id}",
            f"{self.prefix}:requests",
        ]
        ttl_ms = max(int(ttl_s * 1000), 1)
        args: list[str | int | float | bytes] = [
            session,
            state,
            consumed or b"",
            ttl_ms,
            max_sessions,
            f"{self.prefix}:s:",
            request_id,
            max_sessions * REQUESTS_PER_SESSION,
            f"{self.prefix}:r:",
        ]
        await self._write("session write", keys, args)

    async def note(self, session: str, field: str, value: bytes) -> bool:
        return bool(await self._note("session note", [self._session(session)], [field, value]))

    async def session_of(self, request_id: str) -> str | None:
        found = await self.store.get(f"{self.prefix}:r:{request_id}")
        return None if found is None else found.decode()
