"""The per-request record behind ``POST /v1/feedback``, and its batched writer.

A record is built when a request ends (``RoutedView`` is what it reads of a
``RoutedRequest``) and queued; every ``record_flush_s`` the queue goes to the store in
one script call, so the request path never waits on Redis. What a record keeps of the
prompt: the embedding of the last user message (float16) and its text features — the
text only on a cache hit, which the cache needs to label the pair (docs/classifier.md,
"Privacy").
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Protocol

import numpy as np

from gateway.types import Ask, Outcome
from policies.feedback_spec import FeedbackConfig
from policies.schema import GatewayConfig
from policies.stores.feedback import FeedbackStore, RequestRecord
from policies.stores.store import StoreUnavailable
from routers.classifier import ComplexityScore
from routers.embedding import EmbeddingOnce, last_user_text
from routers.features import FEATURES

log = logging.getLogger(__name__)

MAX_PENDING = 50_000  # records queued while the store is down; the oldest go first
MAX_QUERY_CHARS = 16_384
HITS = ("exact", "semantic")


class RoutedView(Protocol):
    """What the feedback loop reads of a finished request (a ``RoutedRequest``)."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def ask(self) -> Ask: ...
    @property
    def embedding(self) -> EmbeddingOnce | None: ...
    @property
    def complexity(self) -> ComplexityScore | None: ...


def routing_inputs(view: RoutedView) -> tuple[bytes | None, tuple[float, ...] | None]:
    """The embedding (if a stage computed it) and the text features (if classified)."""
    vector = view.embedding.computed if view.embedding is not None else None
    features = None
    if view.complexity is not None:  # its mapping is built in FEATURES order
        features = tuple(view.complexity.features.values())
        assert len(features) == len(FEATURES)
    return (None if vector is None else vector.astype(np.float16).tobytes()), features


def build_record(view: RoutedView, outcome: Outcome, entry_id: str | None = None) -> RequestRecord:
    vector, features = routing_inputs(view)
    ask, query = view.ask, None
    if outcome.cache in HITS:
        generation = ask.generation
        text = last_user_text(generation.messages) if generation.messages else generation.prompt
        query = (text or "")[:MAX_QUERY_CHARS]
    return RequestRecord(
        request_id=ask.request_id,
        tenant=ask.principal.tenant,
        key_id=ask.principal.key_id,
        tier=outcome.tier,
        model=outcome.model,
        requested_model=ask.requested_model,
        cache=outcome.cache,
        entry_id=entry_id,
        query_text=query,
        vector=vector,
        features=features,
        cost_usd=outcome.cost_usd,
        ts=time.time(),
    )


class RecordWriter:
    def __init__(self, store: FeedbackStore) -> None:
        self.store = store
        self._pending: deque[RequestRecord] = deque(maxlen=MAX_PENDING)
        self.written = 0

    def add(self, record: RequestRecord) -> None:
        self._pending.append(record)

    def pending(self, request_id: str) -> RequestRecord | None:
        """A record of this replica not written yet (a verdict right after the answer)."""
        return next((r for r in reversed(self._pending) if r.request_id == request_id), None)

    async def flush(self, spec: FeedbackConfig) -> None:
        if not self._pending:
            return
        batch = list(self._pending)
        self._pending.clear()
        try:
            await self.store.put_records(batch, spec.record_ttl_s, spec.max_records)
        except StoreUnavailable as exc:
            log.warning("feedback records not written (kept for the next flush): %s", exc)
            self._pending = deque([*batch, *self._pending], maxlen=MAX_PENDING)
            return
        self.written += len(batch)
