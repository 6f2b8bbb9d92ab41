"""The prompt cache as the request pipeline sees it: plan, look up, store.

``plan`` decides from the tenant's policy and the request's ``Cache-Control`` what may
be looked up and stored (``gateway.cache.plan``); ``lookup`` tries the exact key, then
the semantic index; ``store`` keeps a finished response. A failing or slow store never
fails a request: the call is abandoned, counted, and the cache skipped for a moment.

A request sees the cache through one ``CacheProbe`` (``PromptCache.probe``): ask twice,
compute once, as ``EmbeddingOnce``. The core asks for the answer once, before routing
(``ServingCore.start``: the exact key, then, on a miss, the semantic index; a hit skips
the classifier); the run replays a hit after admission. The probe also stores the live
answer and counts what a hit saved.

A hit is counted when the run serves it (``CacheProbe.served``), not when it is found: a
request refused at admission took no hit. A hit is only ever an answer the request
could have had live: the probe is given the request's ``admits``
(``routers.decision.may_answer``: the tiers and model its forced tier, key and tenant
scope, ``min``/``max`` tier and named model allow), an entry from another tier is passed
over (counted as ``refused:tier``), and the run declines a hit from a tier dearer than a
budget downgrade left it (``CacheProbe.decline``: ``refused:budget``, answered as a miss).

A hit's ``Lookup.entry_id`` names the stored entry (opaque to callers); ``forget``
evicts it from every index and keeps the pair as a ``match: false`` label, for
feedback that flags a cached answer as wrong.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable
from typing import TypeVar

import orjson

from backends.base import GenerationRequest
from gateway.cache.keys import fingerprint
from gateway.cache.plan import Admits, CachePlan, Lookup, cache_directives, cacheable
from gateway.cache.record import CachedResponse
from gateway.cache.stats import CacheCounters, TenantStats
from gateway.cache.verify import CandidateVerifier
from gateway.telemetry.timing import timed
from policies.schema import CacheConfig
from policies.stores.cache.keys import CacheKeys, namespace
from policies.stores.cache.storage import CacheStorage, CacheUnavailable, Semantic, TenantUsage
from policies.tenants import Principal
from routers.embedding import EmbeddingOnce

log = logging.getLogger(__name__)

T = TypeVar("T")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
CANDIDATES = 4
LABELS_KEPT = 1000  # feedback labels per tenant (newest)


class PromptCache:
    def __init__(
        self,
        storage: CacheStorage,
        config: CacheConfig,
        *,
        semantic_enabled: bool,
        verifier: CandidateVerifier | None = None,
        space: str = "",
    ) -> None:
        self.storage = storage
        self.config = config
        self.semantic_enabled = semantic_enabled
        self.space = space  # the embedder's (keys.embedding_space): never mix two
        self.verifier = verifier or CandidateVerifier(None, None)
        self.counters = CacheCounters()
        self.stats = TenantStats(self._flush_stats, self._read_stats)
        self._down_until = 0.0

    async def _flush_stats(self, ns: str, fields: dict[str, float]) -> None:
        keys = CacheKeys(self.config.key_prefix, ns)
        await self._bookkeeping(self.storage.add_stats(keys, fields))

    async def _read_stats(self, ns: str) -> dict[str, float]:
        keys = CacheKeys(self.config.key_prefix, ns)
        return await self._bookkeeping(self.storage.read_stats(keys))

    async def _bookkeeping(self, work: Awaitable[T]) -> T:
        """A figures call: under the cache timeout, but a slow one never marks the cache
        down (lookups go on; the counts wait for the next flush)."""
        try:
            async with asyncio.timeout(self.config.timeout_s * 5):
                return await work
        except TimeoutError as exc:
            raise CacheUnavailable("cache figures timed out") from exc

    def start(self) -> None:
        """Start sharing the per-tenant figures (call inside the running loop)."""
        self.stats.start()

    @property
    def kind(self) -> str:
        return self.storage.kind

    def plan(
        self,
        principal: Principal,
        requested_model: str,
        request: GenerationRequest,
        cache_control: str | None,
    ) -> CachePlan | None:
        """None: this request bypasses the cache entirely."""
        policy = principal.policy.cache
        directives = cache_directives(cache_control)
        lookup, store = "no-cache" not in directives, "no-store" not in directives
        if not policy.enabled or not cacheable(policy, request) or not (lookup or store):
            self._count_bypass("policy" if policy.enabled else "disabled")
            return None
        ns = namespace(principal.tenant)
        mark = fingerprint(ns, requested_model, request, self.space)
        semantic = self.semantic_enabled and policy.semantic and bool(mark.text.strip())
        return CachePlan(
            CacheKeys(self.config.key_prefix, ns, self.space),
            policy,
            mark,
            lookup,
            store,
            semantic,
            principal.tenant,
        )

    def probe(
        self,
        principal: Principal,
        requested_model: str,
        request: GenerationRequest,
        cache_control: str | None,
        embedding: EmbeddingOnce | None,
        admits: Admits | None = None,
    ) -> CacheProbe | None:
        """The request's probe; None: it bypasses the cache (its plan says so)."""
        plan = self.plan(principal, requested_model, request, cache_control)
        return None if plan is None else CacheProbe(self, plan, embedding, admits)

    def _count_bypass(self, reason: str) -> None:
        self.counters.bypassed += 1
        self.counters.by_reason[reason] = self.counters.by_reason.get(reason, 0) + 1

    async def _guarded(self, what: str, work: Awaitable[T]) -> T:
        """Run one store call under the cache timeout; failures become ``CacheUnavailable``."""
        if time.monotonic() < self._down_until:
            if asyncio.iscoroutine(work):
                work.close()
            raise CacheUnavailable("cache skipped after a recent failure")
        try:
            async with asyncio.timeout(self.config.timeout_s):
                return await work
        except (CacheUnavailable, TimeoutError) as exc:
            self.counters.unavailable += 1
            self._down_until = time.monotonic() + self.config.retry_after_s
            log.warning("cache %s failed (%r): serving without the cache", what, exc)
            raise CacheUnavailable(str(exc)) from exc

    async def lookup(
        self, plan: CachePlan, embedding: EmbeddingOnce | None, admits: Admits | None = None
    ) -> Lookup:
        """The exact key, then the semantic index."""
        found = await self.lookup_exact(plan, admits)
        if found.status != "miss":
            return found
        return await self.lookup_semantic(plan, embedding, admits)

    def refuse(self, ns: str, reason: str, count: int = 1) -> None:
        """Count ``count`` entries passed over for ``reason`` (``refused:<reason>``)."""
        self.counters.refused += count
        by_reason = self.counters.refused_by_reason
        by_reason[reason] = by_reason.get(reason, 0) + count
        self.stats.add(ns, f"refused:{reason}", count)

    async def lookup_exact(self, plan: CachePlan, admits: Admits | None = None) -> Lookup:
        """The exact key only (it does not depend on the tier): ``miss`` is not counted,
        the semantic lookup that follows counts it."""
        self.stats.add(plan.keys.ns, "lookups")
        try:
            raw = await self._guarded("get", self.storage.get(plan.keys, plan.fingerprint.exact))
        except CacheUnavailable:
            self._count_bypass("unavailable")
            return Lookup("bypass")
        response = _decode(raw)
        if response is None:
            return Lookup("miss")
        if admits is not None and not admits(response):
            self.refuse(plan.keys.ns, "tier")  # another tier's answer: not this request's
            return Lookup("miss")
        return Lookup("exact", response, 1.0, plan.fingerprint.exact)

    async def lookup_semantic(
        self, plan: CachePlan, embedding: EmbeddingOnce | None, admits: Admits | None = None
    ) -> Lookup:
        """The semantic index, after an exact miss (a miss is counted here, a hit when
        it is served: ``served``)."""
        try:
            found = await self._semantic(plan, embedding, admits)
        except CacheUnavailable:
            self._count_bypass("unavailable")
            return Lookup("bypass")
        if found.status != "semantic":
            self.counters.misses += 1
        return found

    def served(self, plan: CachePlan, found: Lookup) -> None:
        """Count a hit a request was answered with."""
        counters, ns = self.counters, plan.keys.ns
        if found.status == "exact":
            counters.exact_hits += 1
            self.stats.add(ns, "exact_hits")
        elif found.status == "semantic":
            counters.semantic_hits += 1
            self.stats.add(ns, "semantic_hits")
            by_tenant = counters.semantic_by_tenant
            by_tenant[plan.tenant] = by_tenant.get(plan.tenant, 0) + 1

    async def _semantic(
        self, plan: CachePlan, embedding: EmbeddingOnce | None, admits: Admits | None
    ) -> Lookup:
        if not plan.semantic or embedding is None:
            return Lookup("miss")
        vector = await embedding.get()
        candidates = await self._guarded(
            "search",
            self.storage.candidates(plan.keys, plan.fingerprint.prefix, vector, CANDIDATES),
        )
        scored = sorted(((float(c.vector @ vector), c) for c in candidates), key=lambda x: -x[0])
        decoded = {
            c.digest: r
            for s, c in scored
            if s >= plan.policy.semantic_threshold and (r := _decode(c.record)) is not None
        }
        if admits is not None:
            other = [digest for digest, r in decoded.items() if not admits(r)]
            for digest in other:  # another tier's answers: never candidates for this request
                del decoded[digest]
            if other:
                self.refuse(plan.keys.ns, "tier", len(other))
        close = [(s, c) for s, c in scored if c.digest in decoded]
        if not close:
            return Lookup("miss")
        decision = await self.verifier.decide(plan.policy, plan.fingerprint.text, close)
        ns = plan.keys.ns
        for reason, count in decision.refused.items():
            self.refuse(ns, reason, count)
        if decision.verify_ms is not None:
            self.stats.verified(ns, decision.verify_ms)
        if decision.chosen is None:
            return Lookup("miss")
        similarity, candidate = decision.chosen
        return Lookup("semantic", decoded[candidate.digest], similarity, candidate.digest)

    async def store(
        self, plan: CachePlan, response: CachedResponse, embedding: EmbeddingOnce | None
    ) -> bool:
        if not plan.store:
            return False
        semantic = None
        if plan.semantic and embedding is not None:
            vector = await embedding.get()
            semantic = Semantic(plan.fingerprint.prefix, plan.fingerprint.text, vector)
        work = self.storage.put(
            plan.keys,
            plan.fingerprint.exact,
            response.encode(),
            semantic,
            plan.policy.ttl_s,
            plan.policy.max_entries,
        )
        try:
            await self._guarded("put", work)
        except CacheUnavailable:
            return False
        self.counters.stored += 1
        return True

    def record_saving(self, saved_usd: float) -> None:
        self.counters.saved_usd += saved_usd

    async def forget(self, tenant: str, entry_id: str, *, query_text: str) -> bool:
        """Evict the entry a hit came from (every index, every replica) and keep
        ``(query_text, the entry's prompt)`` as a ``match: false`` label. False when the
        entry was already gone (nothing is labelled then). ``CacheUnavailable`` when the
        store is down: the caller answers 503."""
        if not _DIGEST.match(entry_id):
            return False
        keys = self.keys(tenant)
        cached = await self._guarded("remove", self.storage.remove(keys, entry_id))
        if cached is None:
            return False
        label = {
            "a": cached or query_text,  # an exact hit's entry keeps no text: it was the same
            "b": query_text,
            "match": False,
            "kind": "feedback",
            "entry_id": entry_id,
            "ts": time.time(),
        }
        await self._guarded("label", self.storage.add_label(keys, orjson.dumps(label), LABELS_KEPT))
        self.counters.forgotten += 1
        self.stats.add(keys.ns, "forgotten")
        return True

    async def labels(self, tenant: str, count: int = LABELS_KEPT) -> list[dict[str, object]]:
        """The tenant's feedback labels, newest first."""
        rows = await self._guarded("labels", self.storage.labels(self.keys(tenant), count))
        return [orjson.loads(row) for row in rows]

    async def tenant_stats(self, tenant: str) -> dict[str, float]:
        """The tenant's lookup figures summed over every replica (``gateway.cache.stats``)."""
        return await self.stats.read(self.keys(tenant).ns)

    async def flush(self, tenant: str) -> int:
        return await self.storage.flush(self.keys(tenant))

    async def usage(self, tenant: str) -> TenantUsage:
        return await self.storage.usage(self.keys(tenant))

    def keys(self, tenant: str) -> CacheKeys:
        return CacheKeys(self.config.key_prefix, namespace(tenant), self.space)

    async def aclose(self) -> None:
        await self.stats.aclose()
        await self.storage.aclose()


class CacheProbe:
    """One request's lookups, each made at most once whoever asks, and its store."""

    def __init__(
        self,
        cache: PromptCache,
        plan: CachePlan,
        embedding: EmbeddingOnce | None,
        admits: Admits | None = None,
    ) -> None:
        self.cache, self.plan, self.embedding, self.admits = cache, plan, embedding, admits
        self._exact: Lookup | None = None
        self._found: Lookup | None = None

    @property
    def looks_up(self) -> bool:
        """False with ``Cache-Control: no-cache``: nothing is looked up, only stored."""
        return self.plan.lookup

    @property
    def hit_charge(self) -> float:
        """The share of a stored answer's cost a hit is charged (the tenant's policy)."""
        return self.plan.policy.hit_charge

    async def exact(self) -> Lookup:
        """The exact entry (its key does not depend on the tier)."""
        if self._exact is None:
            with timed("cache.exact"):
                self._exact = await self.cache.lookup_exact(self.plan, self.admits)
        return self._exact

    async def found(self) -> Lookup:
        """The exact entry, else the semantic index (an exact miss only)."""
        if self._found is None:
            found = await self.exact()
            if found.status == "miss":
                with timed("cache.lookup"):
                    found = await self.cache.lookup_semantic(self.plan, self.embedding, self.admits)
            self._found = found
        return self._found

    def served(self, found: Lookup) -> None:
        """The run answers with ``found``: the hit is counted now."""
        self.cache.served(self.plan, found)

    def decline(self, reason: str) -> Lookup:
        """A hit the request may not take after all (a budget downgrade left it on a
        cheaper tier than the entry's): counted as refused, answered as a miss."""
        self.cache.refuse(self.plan.keys.ns, reason)
        self._found = Lookup("miss")
        return self._found

    async def store(self, response: CachedResponse) -> bool:
        return await self.cache.store(self.plan, response, self.embedding)

    def saved(self, usd: float) -> None:
        self.cache.record_saving(usd)


def _decode(raw: bytes | None) -> CachedResponse | None:
    if raw is None:
        return None
    try:
        return CachedResponse.decode(raw)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        log.warning("unreadable cache record ignored")
        return None
