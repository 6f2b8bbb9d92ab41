"""The audit log: every admin action, who did it, when, and the state before and after.

Newest first, capped at ``MAX_ENTRIES``. On Redis it is one list,
``{redis_prefix}:{audit}:log`` (LPUSH + LTRIM in one MULTI), shared by every replica.
"""

from __future__ import annotations

import csv
import io
import time
from collections import deque
from typing import Any, Protocol

import orjson
from pydantic import BaseModel, ConfigDict

from policies.stores.store_redis import RedisStore

MAX_ENTRIES = 10_000
CSV_FIELDS = ("at", "actor", "action", "target", "before", "after")


class AuditEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    at: float
    actor: str  # "admin-key:<digest prefix>" or "session:<token digest prefix>"
    action: str  # e.g. "key.create", "key.revoke", "tenant.update", "budget.set"
    target: str
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


def entry(
    actor: str,
    action: str,
    target: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> AuditEntry:
    return AuditEntry(
        at=time.time(), actor=actor, action=action, target=target, before=before, after=after
    )


def to_csv(entries: list[AuditEntry]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS)
    for e in entries:
        writer.writerow(
            [
                f"{e.at:.3f}",
                e.actor,
                e.action,
                e.target,
                "" if e.before is None else orjson.dumps(e.before).decode(),
                "" if e.after is None else orjson.dumps(e.after).decode(),
            ]
        )
    return out.getvalue()


class AuditLog(Protocol):
    async def append(self, item: AuditEntry) -> None: ...

    async def recent(self, limit: int) -> list[AuditEntry]: ...


class MemoryAuditLog:
    def __init__(self) -> None:
        self._entries: deque[AuditEntry] = deque(maxlen=MAX_ENTRIES)

    async def append(self, item: AuditEntry) -> None:
        self._entries.appendleft(item)

    async def recent(self, limit: int) -> list[AuditEntry]:
        return list(self._entries)[:limit]


class RedisAuditLog:
    def __init__(self, store: RedisStore, prefix: str | None = None) -> None:
        """``prefix``: the ``redis_prefix`` (default: the store owner's root)."""
        self.store = store
        base = f"{prefix}:{{audit}}" if prefix is not None else store.keys("audit")
        self.key = f"{base}:log"

    async def append(self, item: AuditEntry) -> None:
        async def write() -> None:
            async with self.store.client.pipeline(transaction=True) as pipe:
                pipe.lpush(self.key, item.model_dump_json())
                pipe.ltrim(self.key, 0, MAX_ENTRIES - 1)
                await pipe.execute()

        await self.store.call("audit append", write)

    async def recent(self, limit: int) -> list[AuditEntry]:
        raw = await self.store.call("audit read", self.store.client.lrange, self.key, 0, limit - 1)
        return [AuditEntry.model_validate_json(r) for r in raw]
