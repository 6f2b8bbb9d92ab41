"""The feedback store on Redis: every key under one hash tag, so each script stays in one
cluster slot; time from the server (``TIME``), so replicas agree on ages and order.

Keys (``P`` = ``<redis_prefix>:{feedback}``):
  P:records   hash    request id -> record (JSON, newline, float16 vector)
  P:expiry    zset    request id by expiry (ms): every write drops what has lapsed, and the
                      soonest-expiring first while there are more than ``max_records``
  P:verdicts  hash    request id -> the client's verdict (dropped with the record)
  P:labels    stream  one entry per label (field ``d``), trimmed to ``max_labels`` and
                      ``label_ttl_days`` by entry id (server milliseconds)
  P:counts    hash    source:tier:good|bad -> labels ever added
  P:refits    list    newest first: "version<newline>entry JSON"
  P:serving   hash    version, model (empty: the base model)
  P:lease     string  the replica refitting now (PX: it lapses if that replica dies)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import replace

from policies.stores.feedback import Label, RefitEntry, RequestRecord, label_count_key
from policies.stores.store_redis import RedisStore

PAGE = 1000
_LENGTH = struct.Struct(">I")
PURGE = 1000  # records dropped per write at most (a lowered bound catches up over writes)

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: records expiry verdicts; ARGV: ttl_ms max_records purge batch, where the batch is
# (request id, record) pairs, each string prefixed by its length (4 bytes, big-endian): one
# argument for the whole batch costs the client far less than two per record.
PUT_RECORDS = (
    _NOW
    + """
local ttl, most, purge = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local batch, pos = ARGV[4], 1
while pos <= #batch do
  local rid, record
  rid, pos = struct.unpack('>I4c0', batch, pos)
  record, pos = struct.unpack('>I4c0', batch, pos)
  redis.call('HSET', KEYS[1], rid, record)
  redis.call('HDEL', KEYS[3], rid)
  redis.call('ZADD', KEYS[2], now + ttl, rid)
end
local function drop(ids)
  for _, rid in ipairs(ids) do
    redis.call('HDEL', KEYS[1], rid)
    redis.call('HDEL', KEYS[3], rid)
    redis.call('ZREM', KEYS[2], rid)
  end
end
drop(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, purge))
local excess = math.min(redis.call('ZCARD', KEYS[2]) - most, purge)
if excess > 0 then drop(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) end
return 1
"""
)

# KEYS: records expiry; ARGV: request id
GET_RECORD = (
    _NOW
    + """
local expires = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expires or tonumber(expires) <= now then return false end
return redis.call('HGET', KEYS[1], ARGV[1])
"""
)

# KEYS: expiry verdicts; ARGV: request id, verdict
SET_VERDICT = (
    _NOW
    + """
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
local previous = redis.call('HGET', KEYS[2], ARGV[1])
if previous then return previous end
if expires and tonumber(expires) > now then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return false
"""
)

# KEYS: labels counts; ARGV: max_labels max_age_ms label count_field
ADD_LABEL = (
    _NOW
    + """
redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], '*', 'd', ARGV[3])
redis.call('XTRIM', KEYS[1], 'MINID', math.max(now - tonumber(ARGV[2]), 0))
redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
return 1
"""
)

# KEYS: refits serving; ARGV: decision model keep entry
ADD_REFIT = """
local version = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if ARGV[1] == 'accepted' or ARGV[1] == 'reverted' then
  version = redis.call('HINCRBY', KEYS[2], 'version', 1)
  redis.call('HSET', KEYS[2], 'model', ARGV[1] == 'accepted' and ARGV[2] or '')
end
redis.call('LPUSH', KEYS[1], version .. '\\n' .. ARGV[4])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return version
"""

# KEYS: lease; ARGV: owner ttl_ms
LEASE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


class RedisFeedbackStore:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        prefix = store.keys("feedback")
        self.records_key, self.expiry_key = f"{prefix}:records", f"{prefix}:expiry"
        self.verdicts_key, self.labels_key = f"{prefix}:verdicts", f"{prefix}:labels"
        self.counts_key, self.refits_key = f"{prefix}:counts", f"{prefix}:refits"
        self.serving_key, self.lease_key = f"{prefix}:serving", f"{prefix}:lease"
        self._put = store.script(PUT_RECORDS)
        self._get = store.script(GET_RECORD)
        self._verdict = store.script(SET_VERDICT)
        self._label = store.script(ADD_LABEL)
        self._refit = store.script(ADD_REFIT)
        self._lease = store.script(LEASE)

    async def now(self) -> float:
        return await self.store.server_time()

    async def put_records(
        self, records: Sequence[RequestRecord], ttl_s: float, max_records: int
    ) -> None:
        if not records:
            return
        parts = []
        for record in records:
            rid, blob = record.request_id.encode(), record.encode()
            parts += [_LENGTH.pack(len(rid)), rid, _LENGTH.pack(len(blob)), blob]
        args: list[str | bytes | int] = [max(int(ttl_s * 1000), 1), max_records, PURGE]
        args.append(b"".join(parts))
        keys = [self.records_key, self.expiry_key, self.verdicts_key]
        await self._put("feedback records", keys, args)

    async def record(self, request_id: str) -> RequestRecord | None:
        raw = await self._get("feedback record", [self.records_key, self.expiry_key], [request_id])
        return None if raw is None else RequestRecord.decode(bytes(raw))

    async def set_verdict(self, request_id: str, verdict: str) -> str | None:
        keys = [self.expiry_key, self.verdicts_key]
        previous = await self._verdict("feedback verdict", keys, [request_id, verdict])
        return None if previous is None else bytes(previous).decode()

    async def add_label(self, label: Label, max_labels: int, max_age_s: float) -> None:
        args: list[str | bytes | int] = [
            max_labels,
            int(max_age_s * 1000),
            label.encode(),
            label_count_key(label),
        ]
        await self._label("feedback label", [self.labels_key, self.counts_key], args)

    async def labels(self) -> list[Label]:
        found: list[Label] = []
        start = "-"
        while True:
            page = await self.store.call(
                "feedback labels", self.store.client.xrange, self.labels_key, start, "+", PAGE
            )
            found.extend(Label.decode(bytes(fields[b"d"])) for _, fields in page)
            if len(page) < PAGE:
                return found
            start = "(" + bytes(page[-1][0]).decode()

    async def label_counts(self) -> dict[str, int]:
        raw = await self.store.hgetall(self.counts_key)
        return {k: int(v) for k, v in raw.items()}

    async def kept_labels(self) -> int:
        return int(await self.store.call("feedback xlen", self.store.client.xlen, self.labels_key))

    async def add_refit(self, entry: RefitEntry, model: bytes | None, keep: int) -> RefitEntry:
        args: list[str | bytes | int] = [entry.decision, model or b"", keep, entry.encode()]
        version = await self._refit("feedback refit", [self.refits_key, self.serving_key], args)
        return replace(entry, version=int(version))

    async def refits(self, limit: int) -> list[RefitEntry]:
        raw = await self.store.call(
            "feedback refits", self.store.client.lrange, self.refits_key, 0, limit - 1
        )
        out = []
        for item in raw:
            version, _, body = bytes(item).partition(b"\n")
            out.append(replace(RefitEntry.decode(body), version=int(version)))
        return out

    async def serving(self) -> tuple[int, bytes | None]:
        version, model = await self.store.call(
            "feedback serving", self.store.client.hmget, self.serving_key, ["version", "model"]
        )
        return int(version or 0), (bytes(model) or None) if model is not None else None

    async def serving_version(self) -> int:
        version = await self.store.call(
            "feedback version", self.store.client.hget, self.serving_key, "version"
        )
        return int(version or 0)

    async def lease(self, owner: str, ttl_s: float) -> bool:
        args: list[str | int] = [owner, max(int(ttl_s * 1000), 1)]
        return bool(await self._lease("feedback lease", [self.lease_key], args))
