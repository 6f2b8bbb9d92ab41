"""The prompt cache as the request pipeline sees it: plan, look up, store.

``plan`` decides from the tenant's policy and the request's ``Cache-Control`` what may
be looked up and stored; ``lookup`` tries the exact key, then the semantic index;
``store`` keeps a finished response. A failing or slow store never fails a request:
the call is abandoned, counted, and the cache skipped for a moment.

A request sees the cache through one ``CacheProbe`` (``PromptCache.probe``): ask twice,
compute once, as ``EmbeddingOnce``. Routing asks for the exact entry before classifying
(a hit skips the classifier); the run asks for the answer after admission, which reuses
that lookup and only then searches the semantic index; the probe also stores the live
answer and counts what a hit saved.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import orjson

from backends.base import GenerationRequest
from gateway.cache.keys import CacheKeys, Fingerprint, fingerprint, namespace
from gateway.cache.record import CachedResponse
from gateway.cache.storage import CacheStorage, CacheUnavailable, Semantic, TenantUsage
from gateway.timing import timed
from policies.schema import CacheConfig, CachePolicy
from policies.tenants import Principal
from routers.embedding import EmbeddingOnce
from routers.semantic_verify import verified

log = logging.getLogger(__name__)

T = TypeVar("T")
CacheStatus = Literal["exact", "semantic", "miss", "bypass"]
CANDIDATES = 4


@dataclass(frozen=True, slots=True)
class CachePlan:
    keys: CacheKeys
    policy: CachePolicy
    fingerprint: Fingerprint
    lookup: bool
    store: bool
    semantic: bool
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class Lookup:
    status: CacheStatus
    response: CachedResponse | None = None
    similarity: float | None = None


@dataclass(slots=True)
class CacheCounters:
    exact_hits: int = 0
    semantic_hits: int = 0
    refused: int = 0  # semantic candidates above the threshold the verifier turned down
    misses: int = 0
    bypassed: int = 0
    stored: int = 0
    unavailable: int = 0
    saved_usd: float = 0.0
    by_reason: dict[str, int] = field(default_factory=dict)
    semantic_by_tenant: dict[str, int] = field(default_factory=dict)


def cache_directives(header: str | None) -> set[str]:
    if not header:
        return set()
    return {part.strip().split("=", 1)[0].lower() for part in header.split(",") if part.strip()}


def cacheable(policy: CachePolicy, request: GenerationRequest) -> bool:
    """Deterministic enough to replay: low temperature, or a fixed seed where allowed."""
    if request.logprobs:  # a stored answer keeps no log-probabilities to replay
        return False
    temperature = 1.0 if request.sampling.temperature is None else request.sampling.temperature
    if temperature <= policy.max_temperature:
        return True
    return policy.cache_seeded and request.sampling.seed is not None


class PromptCache:
    def __init__(
        self, storage: CacheStorage, config: CacheConfig, *, semantic_enabled: bool
    ) -> None:
        self.storage = storage
        self.config = config
        self.semantic_enabled = semantic_enabled
        self.counters = CacheCounters()
        self._down_until = 0.0

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
        mark = fingerprint(ns, requested_model, request)
        semantic = self.semantic_enabled and policy.semantic and bool(mark.text.strip())
        return CachePlan(
            CacheKeys(self.config.key_prefix, ns),
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
    ) -> CacheProbe | None:
        """The request's probe; None: it bypasses the cache (its plan says so)."""
        plan = self.plan(principal, requested_model, request, cache_control)
        return None if plan is None else CacheProbe(self, plan, embedding)

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

    async def lookup(self, plan: CachePlan, embedding: EmbeddingOnce | None) -> Lookup:
        """The exact key, then the semantic index."""
        found = await self.lookup_exact(plan)
        if found.status != "miss":
            return found
        return await self.lookup_semantic(plan, embedding)

    async def lookup_exact(self, plan: CachePlan) -> Lookup:
        """The exact key only (it does not depend on the tier): ``miss`` is not counted,
        the semantic lookup that follows counts it."""
        try:
            raw = await self._guarded("get", self.storage.get(plan.keys, plan.fingerprint.exact))
        except CacheUnavailable:
            self._count_bypass("unavailable")
            return Lookup("bypass")
        response = _decode(raw)
        if response is None:
            return Lookup("miss")
        self.counters.exact_hits += 1
        return Lookup("exact", response, 1.0)

    async def lookup_semantic(self, plan: CachePlan, embedding: EmbeddingOnce | None) -> Lookup:
        """The semantic index, after an exact miss."""
        try:
            found = await self._semantic(plan, embedding)
        except CacheUnavailable:
            self._count_bypass("unavailable")
            return Lookup("bypass")
        if found.status == "semantic":
            self.counters.semantic_hits += 1
            by_tenant = self.counters.semantic_by_tenant
            by_tenant[plan.tenant] = by_tenant.get(plan.tenant, 0) + 1
        else:
            self.counters.misses += 1
        return found

    async def _semantic(self, plan: CachePlan, embedding: EmbeddingOnce | None) -> Lookup:
        if not plan.semantic or embedding is None:
            return Lookup("miss")
        vector = await embedding.get()
        candidates = await self._guarded(
            "search",
            self.storage.candidates(plan.keys, plan.fingerprint.prefix, vector, CANDIDATES),
        )
        scored = sorted(((float(c.vector @ vector), c) for c in candidates), key=lambda x: -x[0])
        for similarity, candidate in scored:
            if similarity < plan.policy.semantic_threshold:
                break
            if not verified(plan.policy.semantic_verify, candidate.text, plan.fingerprint.text):
                self.counters.refused += 1
                continue
            response = _decode(candidate.record)
            if response is not None:
                return Lookup("semantic", response, similarity)
        return Lookup("miss")

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

    async def flush(self, tenant: str) -> int:
        return await self.storage.flush(self.keys(tenant))

    async def usage(self, tenant: str) -> TenantUsage:
        return await self.storage.usage(self.keys(tenant))

    def keys(self, tenant: str) -> CacheKeys:
        return CacheKeys(self.config.key_prefix, namespace(tenant))

    async def aclose(self) -> None:
        await self.storage.aclose()


class CacheProbe:
    """One request's lookups, each made at most once whoever asks, and its store."""

    def __init__(
        self, cache: PromptCache, plan: CachePlan, embedding: EmbeddingOnce | None
    ) -> None:
        self.cache, self.plan, self.embedding = cache, plan, embedding
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
                self._exact = await self.cache.lookup_exact(self.plan)
        return self._exact

    async def found(self) -> Lookup:
        """The exact entry, else the semantic index (an exact miss only)."""
        if self._found is None:
            found = await self.exact()
            if found.status == "miss":
                with timed("cache.lookup"):
                    found = await self.cache.lookup_semantic(self.plan, self.embedding)
            self._found = found
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
