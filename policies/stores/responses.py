"""Stored Responses: in the shared store (Redis, or this process), per owner, with a TTL.

A response belongs to the API key that created it: its record lives under a digest of
(tenant, key id), so another tenant, or another key of the same tenant, never finds it
(``GET`` and ``DELETE`` answer 404, ``previous_response_id`` a 400, as for an id that
never existed). A record holds the conversation the response was given (continued
conversations included) and the Response object; it expires after
``responses.ttl_s`` and is not kept when larger than ``responses.max_bytes``.

A tenant's records are counted against its caps (``policies.stores.quota``: count and
bytes, expiring with the records): ``save`` keeps a record only when it fits.

In process (no ``redis_url``) the records also share one memory budget (``max_bytes``
times 16), the oldest dropped first: the in-process store only drops an expired value
when it is read, and a record nobody reads again must not stay forever.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from policies.responses_spec import ResponsesConfig
from policies.stores.quota import Caps, MemoryQuotas, QuotaStore, RedisQuotas, Usage
from policies.stores.store import Store
from policies.stores.store_redis import RedisStore
from policies.tenants import Principal

log = logging.getLogger(__name__)

Item = dict[str, Any]
RESPONSE_ID = re.compile(r"^resp_[0-9a-f]{32}$")
MEMORY_RECORDS = 16  # the in-process budget, in records of the largest size


@dataclass(frozen=True, slots=True)
class StoredResponse:
    input: tuple[Item, ...]  # every item the response was given, with ids
    response: Item  # the Response object
    session: str | None = None  # the routing session it was answered in (its chain's)

    def conversation(self) -> list[Item]:
        """What a continuation starts from: the input, then the output's messages and calls."""
        output = [i for i in self.response.get("output", ()) if i.get("type") != "reasoning"]
        return [*self.input, *output]

    def encode(self) -> bytes:
        data: Item = {"input": list(self.input), "response": self.response}
        if self.session is not None:
            data["session"] = self.session
        return orjson.dumps(data)

    @classmethod
    def decode(cls, raw: bytes) -> StoredResponse:
        data = orjson.loads(raw)
        session = data.get("session")
        return cls(
            tuple(data["input"]), data["response"], session if isinstance(session, str) else None
        )


def owner_of(principal: Principal) -> str:
    """The record's owner: a digest of the tenant and the key (both may hold any name)."""
    return hashlib.sha256(f"{principal.tenant}\0{principal.key_id}".encode()).hexdigest()[:32]


def input_size(items: Sequence[Item]) -> int:
    return len(orjson.dumps(list(items)))


def input_fits(spec: ResponsesConfig, items: Sequence[Item]) -> bool:
    """Whether the input alone leaves room under the size cap (checked before running)."""
    return input_size(items) < spec.max_bytes


def caps(spec: ResponsesConfig) -> Caps:
    return Caps(spec.tenant_max_count, spec.tenant_max_bytes)


class ResponseStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.quotas: QuotaStore = (
            RedisQuotas(store, "responses") if isinstance(store, RedisStore) else MemoryQuotas()
        )
        self._sizes: OrderedDict[str, int] | None = (
            OrderedDict() if store.kind == "memory" else None
        )
        self._held = 0

    def _key(self, owner: str, response_id: str) -> str:
        return f"{self.store.keys('responses', owner)}:{response_id}"

    async def save(
        self, spec: ResponsesConfig, principal: Principal, record: StoredResponse
    ) -> bool:
        """Keep the record; False when it is larger than the cap, or the tenant's stored
        Responses are at their caps (nothing is kept). Raises ``StoreUnavailable`` when
        the store did not take it."""
        raw = record.encode()
        if len(raw) > spec.max_bytes:
            log.info("response %s not stored: %d bytes", record.response["id"], len(raw))
            return False
        key = self._key(owner_of(principal), str(record.response["id"]))
        if not await self.quotas.admit(principal.tenant, key, len(raw), spec.ttl_s, caps(spec)):
            log.info("response %s not stored: tenant %s at its caps", key, principal.tenant)
            return False
        await self.store.set(key, raw, ttl_s=spec.ttl_s)
        await self._account(spec, key, len(raw))
        return True

    async def usage(self, tenant: str) -> Usage:
        """What the tenant's stored Responses hold now (every key of it)."""
        return await self.quotas.usage(tenant)

    async def room(self, spec: ResponsesConfig, principal: Principal, size: int) -> bool:
        """Whether one more record of ``size`` bytes fits the tenant's caps now (checked
        before a request runs; ``save`` admits atomically)."""
        used = await self.quotas.usage(principal.tenant)
        return used.count < spec.tenant_max_count and used.bytes + size <= spec.tenant_max_bytes

    async def _account(self, spec: ResponsesConfig, key: str, size: int) -> None:
        if self._sizes is None:
            return
        self._held += size - self._sizes.pop(key, 0)
        self._sizes[key] = size
        while self._held > spec.max_bytes * MEMORY_RECORDS and len(self._sizes) > 1:
            oldest, dropped = self._sizes.popitem(last=False)
            self._held -= dropped
            await self.store.delete(oldest)

    async def load(self, principal: Principal, response_id: str) -> StoredResponse | None:
        """The owner's record (None: no such response, expired, or someone else's)."""
        if not RESPONSE_ID.match(response_id):
            return None
        raw = await self.store.get(self._key(owner_of(principal), response_id))
        return None if raw is None else StoredResponse.decode(raw)

    async def delete(self, principal: Principal, response_id: str) -> bool:
        if not RESPONSE_ID.match(response_id):
            return False
        key = self._key(owner_of(principal), response_id)
        if self._sizes is not None and key in self._sizes:
            self._held -= self._sizes.pop(key)
        deleted = await self.store.delete(key) > 0
        if deleted:
            await self.quotas.release(principal.tenant, key)
        return deleted
