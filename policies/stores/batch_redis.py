"""Batch jobs on Redis: a tenant's files and batches in one slot, one queue for all.

Each tenant's keys share the hash tag ``{batch:TENANT}``, so every script (a file and
the tenant's byte count, a line's result and its batch's counts:
``policies/stores/batch_redis_scripts.py``) runs in one slot of a Redis Cluster. The
queue (``queue``) is one stream with one consumer group
(``policies/stores/batch_queue_redis.py``). A result is written with ``HSETNX`` in the
script that counts it: once per line.

Keys (``P`` = ``<redis_prefix>``; docs/redis-keys.md):
  P:{batch:T}:usage        hash   bytes, open, lines: what the tenant holds; seq
  P:{batch:T}:files        zset   file id by creation order (``seq``)
  P:{batch:T}:f:ID         hash   a file's record
  P:{batch:T}:blob:ID      string a file's bytes (unless they are in the bucket)
  P:{batch:T}:batches      zset   batch id by creation order (``seq``)
  P:{batch:T}:b:ID         hash   a batch's record and counts
  P:{batch:T}:in:ID        hash   line index → input, until the line has its result
  P:{batch:T}:res:ID       hash   line index → result (kind + line)
  P:{batch:T}:expiry       zset   ``f:ID`` / ``b:ID`` by expiry (unix s)
  P:{batches}:lines        stream the queue (group ``runners``): tenant, batch, index
  P:{batches}:lines:generation  int  when the group was made (ms; ``gateway.batches.runner``)
  P:{batches}:open         set    ``TENANT/ID`` of batches not yet ended
  P:{batches}:tenants      set    tenants with anything kept
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.batches_spec import BatchLimits
from policies.stores import batch_redis_scripts as scripts
from policies.stores.batch_queue_redis import RedisLineQueue
from policies.stores.batch_records import (
    ENDED,
    LINE_COUNTS,
    BatchRecord,
    FileRecord,
    LineResult,
    Take,
    line_action,
)
from policies.stores.store_redis import RedisStore

CHUNK = 500  # lines per script or pipeline when a batch is written


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}


def _argv(fields: Mapping[str, str]) -> list[str]:
    return [x for pair in fields.items() for x in pair]


class RedisBatchStore:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        shared = store.keys("batches")
        self.queue = RedisLineQueue(store)
        self.open_key = f"{shared}:open"
        self.tenants_key = f"{shared}:tenants"
        self._add_file = store.script(scripts.ADD_FILE)
        self._remove_file = store.script(scripts.REMOVE_FILE)
        self._add_batch = store.script(scripts.ADD_BATCH)
        self._add_results = store.script(scripts.ADD_RESULTS)
        self._finish = store.script(scripts.FINISH)
        self._take = store.script(scripts.TAKE)
        self._move = store.script(scripts.MOVE)
        self._remove_batch = store.script(scripts.REMOVE_BATCH)

    def _k(self, tenant: str, name: str) -> str:
        return f"{self.store.keys(f'batch:{tenant}')}:{name}"

    def _file_keys(self, tenant: str, file_id: str) -> list[str]:
        k = self._k
        return [
            k(tenant, "usage"),
            k(tenant, "files"),
            k(tenant, f"f:{file_id}"),
            k(tenant, f"blob:{file_id}"),
            k(tenant, "expiry"),
        ]

    def _line_keys(self, tenant: str, batch_id: str) -> list[str]:
        k = self._k
        return [
            k(tenant, f"b:{batch_id}"),
            k(tenant, f"in:{batch_id}"),
            k(tenant, f"res:{batch_id}"),
        ]

    async def _call(self, what: str, fn: Any, *args: Any) -> Any:
        return await self.store.call(what, fn, *args)

    async def add_file(self, record: FileRecord, content: bytes | None, limit: int) -> bool:
        keys = self._file_keys(record.tenant, record.id)
        argv: list[str | int | bytes] = [
            record.id,
            limit,
            record.bytes,
            record.created_at,
            record.expires_at or "",
            "1" if content is not None else "0",
            content or b"",
            *_argv(record.fields()),
        ]
        added = bool(await self._add_file("batch file add", keys, argv))
        if added:
            await self._call(
                "batch tenants", self.store.client.sadd, self.tenants_key, record.tenant
            )
        return added

    async def file(self, tenant: str, file_id: str) -> FileRecord | None:
        raw = await self.store.hgetall(self._k(tenant, f"f:{file_id}"))
        return FileRecord.from_fields({k: v.decode() for k, v in raw.items()}) if raw else None

    async def file_content(self, tenant: str, file_id: str) -> bytes | None:
        return await self.store.get(self._k(tenant, f"blob:{file_id}"))

    async def files(self, tenant: str) -> list[FileRecord]:
        found = await self._records(tenant, "files", "f")
        return [FileRecord.from_fields(raw) for raw in found]

    async def _records(self, tenant: str, index: str, kind: str) -> list[dict[str, str]]:
        """Every record ``index`` lists, in its order: one pipelined read (one slot)."""
        client = self.store.client

        async def read() -> list[Any]:
            ids = await client.zrange(self._k(tenant, index), 0, -1)
            async with client.pipeline(transaction=False) as pipe:
                for item in ids:
                    pipe.hgetall(self._k(tenant, f"{kind}:{_text(item)}"))
                found: list[Any] = await pipe.execute()
                return found

        rows = await self._call(f"batch {index}", read)
        return [{_text(k): _text(v) for k, v in row.items()} for row in rows if row]

    async def remove_file(self, tenant: str, file_id: str) -> FileRecord | None:
        keys = self._file_keys(tenant, file_id)
        raw = await self._remove_file("batch file remove", keys, [file_id])
        return FileRecord.from_fields(_pairs(raw)) if raw else None

    async def add_batch(self, record: BatchRecord, limits: BatchLimits) -> str | None:
        keys = [
            self._k(record.tenant, "usage"),
            self._k(record.tenant, "batches"),
            self._k(record.tenant, f"b:{record.id}"),
        ]
        argv: list[str | int] = [
            record.id,
            record.created_at,
            limits.open_batches,
            limits.lines,
            record.total,
            *_argv(record.fields()),
        ]
        # In the open set first: a record whose writer died is still found by the sweep.
        client = self.store.client
        await self._call("batch open", client.sadd, self.open_key, f"{record.tenant}/{record.id}")
        refused = _text(await self._add_batch("batch add", keys, argv))
        if refused != "ok":
            await self._call(
                "batch open", client.srem, self.open_key, f"{record.tenant}/{record.id}"
            )
            return refused
        await self._call("batch tenants", client.sadd, self.tenants_key, record.tenant)
        return None

    async def add_lines(
        self,
        tenant: str,
        batch_id: str,
        lines: Mapping[int, bytes],
        results: Sequence[tuple[int, LineResult]],
    ) -> None:
        keys = self._line_keys(tenant, batch_id)
        items = list(lines.items())
        for start in range(0, len(items), CHUNK):
            chunk = dict(items[start : start + CHUNK])
            mapping = {str(k): v for k, v in chunk.items()}
            await self._call("batch lines", self.store.client.hset, keys[1], None, None, mapping)
        for start in range(0, len(results), CHUNK):
            part = results[start : start + CHUNK]
            argv: list[str | int | bytes] = []
            for index, result in part:
                argv += [index, result.encoded(), LINE_COUNTS[result.kind]]
            await self._add_results("batch results", keys, argv)

    async def batch(self, tenant: str, batch_id: str) -> BatchRecord | None:
        raw = await self.store.hgetall(self._k(tenant, f"b:{batch_id}"))
        return BatchRecord.from_fields({k: v.decode() for k, v in raw.items()}) if raw else None

    async def batches(self, tenant: str) -> list[BatchRecord]:
        found = await self._records(tenant, "batches", "b")
        return [BatchRecord.from_fields(raw) for raw in found]

    async def move(
        self,
        tenant: str,
        batch_id: str,
        sources: Sequence[str],
        to: str,
        at: int,
        changes: Mapping[str, str] | None = None,
        keep_s: float = 0.0,
    ) -> tuple[BatchRecord | None, bool]:
        keys = [
            self._k(tenant, f"b:{batch_id}"),
            self._k(tenant, "usage"),
            self._k(tenant, "expiry"),
        ]
        argv: list[str | int] = [
            batch_id,
            ",".join(sources),
            to,
            at,
            int(keep_s),
            "1" if to in ENDED else "0",
            *_argv(dict(changes or {})),
        ]
        moved, raw = await self._move("batch move", keys, argv)
        if not raw:
            return None, False
        record = BatchRecord.from_fields(_pairs(raw))
        if record.status in ENDED:  # the open set has its own slot: after the script
            member = f"{tenant}/{batch_id}"
            await self._call("batch open", self.store.client.srem, self.open_key, member)
        return record, bool(moved)

    async def take(self, tenant: str, batch_id: str, index: int, now: int) -> Take:
        reply = await self._take("batch take", self._line_keys(tenant, batch_id), [index])
        action = _text(reply[0])
        record = BatchRecord.from_fields(_pairs(reply[2])) if len(reply) > 2 else None
        line = reply[1] if len(reply) > 1 and isinstance(reply[1], bytes) else b""
        if action == "run" and record is not None:
            action = line_action(record, now)
        return Take(action, line, record)

    async def finish(
        self, tenant: str, batch_id: str, index: int, result: LineResult
    ) -> tuple[bool, bool]:
        argv: list[str | int | bytes] = [
            index,
            result.encoded(),
            LINE_COUNTS[result.kind],
            result.cost_nano,
            result.saved_nano,
            result.prompt_tokens,
            result.completion_tokens,
            result.cached_tokens,
        ]
        reply = await self._finish("batch finish", self._line_keys(tenant, batch_id), argv)
        return bool(int(reply[0])), bool(int(reply[1]))

    async def results(self, tenant: str, batch_id: str) -> dict[int, bytes]:
        key = self._k(tenant, f"res:{batch_id}")
        found: dict[int, bytes] = {}
        cursor = 0
        while True:
            cursor, part = await self._call(
                "batch results", self.store.client.hscan, key, cursor, None, 1000
            )
            found.update({int(k): v for k, v in part.items()})
            if cursor == 0:
                return found

    async def unfinished(self, tenant: str, batch_id: str) -> list[int]:
        key = self._k(tenant, f"in:{batch_id}")
        return sorted(
            int(k) for k in await self._call("batch unfinished", self.store.client.hkeys, key)
        )

    async def drop_lines(self, tenant: str, batch_id: str) -> None:
        _, inputs, results = self._line_keys(tenant, batch_id)
        await self.store.delete(inputs, results)

    async def remove_batch(self, tenant: str, batch_id: str) -> bool:
        k = self._k
        keys = [
            k(tenant, "usage"),
            k(tenant, "batches"),
            k(tenant, f"b:{batch_id}"),
            k(tenant, f"in:{batch_id}"),
            k(tenant, f"res:{batch_id}"),
            k(tenant, "expiry"),
        ]
        removed = bool(await self._remove_batch("batch remove", keys, [batch_id, ",".join(ENDED)]))
        await self._call(
            "batch open", self.store.client.srem, self.open_key, f"{tenant}/{batch_id}"
        )
        return removed

    async def open_batches(self) -> list[tuple[str, str]]:
        members = await self._call("batch open", self.store.client.smembers, self.open_key)
        pairs = (_text(m).partition("/") for m in members)
        return sorted((tenant, batch_id) for tenant, _, batch_id in pairs)

    async def due(self, now: int) -> list[tuple[str, str, str]]:
        client = self.store.client
        tenants = await self._call("batch tenants", client.smembers, self.tenants_key)
        found: list[tuple[str, str, str]] = []
        for raw in sorted(tenants):
            tenant = _text(raw)
            key = self._k(tenant, "expiry")
            for member in await self._call("batch due", client.zrangebyscore, key, "-inf", now):
                kind, _, item = _text(member).partition(":")
                found.append((tenant, "file" if kind == "f" else "batch", item))
        return found
