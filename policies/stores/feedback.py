"""Where replicas keep what the feedback loop learns from: per-request records, labels,
and the refits with the model that serves.

* A **record** is written when a request ends (in batches): who asked (tenant, key), which
  tier and model answered, the cache status (and a hit's opaque ``entry_id``), and the
  routing inputs a refit needs — the embedding of the last user message (float16) and the
  text features, never the prompt; the last user text only for a cache hit, which the
  cache needs to label the pair a client calls bad. Kept ``record_ttl_s``, at most
  ``max_records`` (the oldest go first). ``POST /v1/feedback`` reads it and sets its
  verdict, once.
* A **label** says whether one tier's answer to one request was acceptable (from the judge
  or a client), with its own copy of the routing inputs: the newest ``max_labels`` are
  kept, none older than ``label_ttl_days``, oldest first in time order (the refit's
  time-split hold-out is the newest).
* A **refit entry** records one refit and what came of it; the **serving** model is the
  last accepted one (``None``: the base model), with a version every replica polls.

``MemoryFeedbackStore`` is here; ``RedisFeedbackStore`` in ``policies/stores/feedback_redis.py``;
both pass ``tests/policies/stores/test_feedback_store.py``.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol

import orjson

Decision = Literal["accepted", "rolled_back", "reverted"]
VERDICTS = ("good", "bad")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: str
    tenant: str
    key_id: str
    tier: str  # the tier that answered
    model: str
    requested_model: str
    cache: str  # miss | exact | semantic | bypass
    entry_id: str | None  # the cache entry a hit came from (the cache's opaque id)
    query_text: str | None  # the last user text, on a cache hit only
    vector: bytes | None  # float16 embedding of the last user message, when computed
    features: tuple[float, ...] | None  # routers.features.text_features, when classified
    cost_usd: float
    ts: float

    def encode(self) -> bytes:
        # Positional (every request writes one): asdict() would cost ~50x more.
        head = orjson.dumps(
            (
                self.request_id,
                self.tenant,
                self.key_id,
                self.tier,
                self.model,
                self.requested_model,
                self.cache,
                self.entry_id,
                self.query_text,
                self.features,
                self.cost_usd,
                self.ts,
            )
        )
        return head + b"\n" + (self.vector or b"")

    @classmethod
    def decode(cls, raw: bytes) -> RequestRecord:
        head, _, vector = raw.partition(b"\n")
        rid, tenant, key_id, tier, model, requested, cache, entry, query, features, cost, ts = (
            orjson.loads(head)
        )
        return cls(
            rid,
            tenant,
            key_id,
            tier,
            model,
            requested,
            cache,
            entry,
            query,
            vector or None,
            None if features is None else tuple(features),
            cost,
            ts,
        )


@dataclass(frozen=True, slots=True)
class Label:
    request_id: str
    tier: str  # the tier whose answer was judged
    acceptable: bool
    source: str  # judge | client
    vector: bytes | None
    features: tuple[float, ...] | None
    ts: float
    tenant: str
    reference_tier: str | None = None  # the judge's: the tier it compared against
    cost_usd: float = 0.0  # of the judged answer
    reference_cost_usd: float = 0.0

    def encode(self) -> bytes:
        meta = {k: v for k, v in asdict(self).items() if k != "vector"}
        return orjson.dumps(meta) + b"\n" + (self.vector or b"")

    @classmethod
    def decode(cls, raw: bytes) -> Label:
        head, _, vector = raw.partition(b"\n")
        meta = orjson.loads(head)
        features = meta.pop("features")
        return cls(
            **meta,
            vector=vector or None,
            features=None if features is None else tuple(features),
        )


@dataclass(frozen=True, slots=True)
class RefitEntry:
    """One refit: what it was checked on, what it scored, what was decided."""

    ts: float
    decision: Decision  # accepted: serves; rolled_back: discarded; reverted: back to base
    reason: str
    trained: int  # labels fitted on
    held_out: int  # the newest labels, checked on
    metrics: dict[str, float]  # hold-out log-loss / accuracy / cost of base, serving, refit
    version: int = 0  # the serving version after this entry (set by the store)
    by: str = ""  # the replica (or CLI) that ran it
    labels_seen: int = 0  # labels ever added when it ran (the next refit waits for more)

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes) -> RefitEntry:
        return cls(**orjson.loads(raw))


class FeedbackStore(Protocol):
    async def now(self) -> float:
        """The clock every replica stamps labels with (Redis ``TIME``)."""
        ...

    async def put_records(
        self, records: Sequence[RequestRecord], ttl_s: float, max_records: int
    ) -> None: ...

    async def record(self, request_id: str) -> RequestRecord | None:
        """The record, unless it expired or was pushed out."""
        ...

    async def set_verdict(self, request_id: str, verdict: str) -> str | None:
        """Set the record's client verdict once; the verdict it already had, if any
        (then nothing changes)."""
        ...

    async def add_label(self, label: Label, max_labels: int, max_age_s: float) -> None: ...

    async def labels(self) -> list[Label]:
        """Every label kept, oldest first."""
        ...

    async def label_counts(self) -> dict[str, int]:
        """Labels ever added, by ``source:tier:good|bad``."""
        ...

    async def kept_labels(self) -> int:
        """How many labels the store holds now."""
        ...

    async def add_refit(self, entry: RefitEntry, model: bytes | None, keep: int) -> RefitEntry:
        """Record a refit; ``accepted``: ``model`` serves from now on, ``reverted``: the base
        does (both bump the version); ``rolled_back``: what served still does. The entry
        with the serving version after it; the newest ``keep`` entries are kept."""
        ...

    async def refits(self, limit: int) -> list[RefitEntry]:
        """The newest first."""
        ...

    async def serving(self) -> tuple[int, bytes | None]:
        """The serving version and its model (None: the base model)."""
        ...

    async def serving_version(self) -> int: ...

    async def lease(self, owner: str, ttl_s: float) -> bool:
        """Take (or renew) the one refit lease; False while another owner holds it."""
        ...


class MemoryFeedbackStore:
    """One process; expiry by the wall clock, bounds by count."""

    def __init__(self) -> None:
        self._records: OrderedDict[str, tuple[float, RequestRecord]] = OrderedDict()
        self._verdicts: dict[str, str] = {}
        self._labels: deque[Label] = deque()
        self._counts: dict[str, int] = {}
        self._refits: deque[RefitEntry] = deque()
        self._version = 0
        self._model: bytes | None = None
        self._lease: tuple[str, float] | None = None

    async def now(self) -> float:
        return time.time()

    def _expire(self, now: float) -> None:
        while self._records:
            rid, (expires, _) = next(iter(self._records.items()))
            if expires > now:
                break
            self._records.popitem(last=False)
            self._verdicts.pop(rid, None)

    async def put_records(
        self, records: Sequence[RequestRecord], ttl_s: float, max_records: int
    ) -> None:
        now = time.time()
        self._expire(now)
        for record in records:
            self._records[record.request_id] = (now + ttl_s, record)
            self._records.move_to_end(record.request_id)
        while len(self._records) > max_records:
            rid, _ = self._records.popitem(last=False)
            self._verdicts.pop(rid, None)

    async def record(self, request_id: str) -> RequestRecord | None:
        now = time.time()
        self._expire(now)
        held = self._records.get(request_id)
        return None if held is None or held[0] <= now else held[1]

    async def set_verdict(self, request_id: str, verdict: str) -> str | None:
        previous = self._verdicts.get(request_id)
        if previous is None and await self.record(request_id) is not None:
            self._verdicts[request_id] = verdict
        return previous

    async def add_label(self, label: Label, max_labels: int, max_age_s: float) -> None:
        self._labels.append(label)
        oldest = label.ts - max_age_s
        while self._labels and (len(self._labels) > max_labels or self._labels[0].ts < oldest):
            self._labels.popleft()
        key = label_count_key(label)
        self._counts[key] = self._counts.get(key, 0) + 1

    async def labels(self) -> list[Label]:
        return list(self._labels)

    async def label_counts(self) -> dict[str, int]:
        return dict(self._counts)

    async def kept_labels(self) -> int:
        return len(self._labels)

    async def add_refit(self, entry: RefitEntry, model: bytes | None, keep: int) -> RefitEntry:
        if entry.decision == "accepted":
            self._version, self._model = self._version + 1, model
        elif entry.decision == "reverted":
            self._version, self._model = self._version + 1, None
        stored = replace(entry, version=self._version)
        self._refits.appendleft(stored)
        while len(self._refits) > keep:
            self._refits.pop()
        return stored

    async def refits(self, limit: int) -> list[RefitEntry]:
        return list(self._refits)[:limit]

    async def serving(self) -> tuple[int, bytes | None]:
        return self._version, self._model

    async def serving_version(self) -> int:
        return self._version

    async def lease(self, owner: str, ttl_s: float) -> bool:
        now = time.monotonic()
        if self._lease is not None and self._lease[0] != owner and self._lease[1] > now:
            return False
        self._lease = (owner, now + ttl_s)
        return True


def label_count_key(label: Label) -> str:
    return f"{label.source}:{label.tier}:{'good' if label.acceptable else 'bad'}"


def parse_count_key(key: str) -> dict[str, Any]:
    source, rest = key.split(":", 1)
    tier, verdict = rest.rsplit(":", 1)
    return {"source": source, "tier": tier, "verdict": verdict}
