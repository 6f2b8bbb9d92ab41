"""The serving core: one per config snapshot, over the collaborators built once.

The lifespan builds the collaborators (pools, the cache, the money's stores, the router's
models, metrics) and a ``ServingCore`` over them and the config; each policy reload builds
a new core over the same collaborators and the new snapshot. A request takes the core
once, with its key lookup: ``start(ask)`` asks the cache, routes (``gateway.core.route``)
and gives the request's ``Run`` (``gateway.core.serving``), which runs wholly on it;
``embed`` runs an embeddings call (``gateway.core.embedding``) to its end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from backends.pool import EnginePool, Replica
from gateway.cache.record import CachedResponse
from gateway.cache.service import PromptCache
from gateway.core.embedding import Embedded, embed
from gateway.core.entrance import Options
from gateway.core.route import embedding_of, route
from gateway.core.serving import Run
from gateway.guardrails.screen import keep_local, screen_off_loop
from gateway.learning.service import Feedback
from gateway.money.hold import Money
from gateway.telemetry.metrics import GatewayMetrics
from gateway.types import Ask, Readiness, RoutedRequest
from gateway.wire.embeddings import EmbeddingRequest
from policies.schema import GatewayConfig
from policies.stores.batch_bucket import Bucket
from policies.stores.batch_records import BatchStore
from policies.stores.responses import ResponseStore
from policies.stores.store import Store
from policies.tenants import Principal
from routers.decision import may_answer
from routers.router import Router
from routers.wordpiece import ServedEmbedder


@dataclass(frozen=True, slots=True)
class Collaborators:
    pools: Mapping[str, EnginePool]
    replicas: dict[str, list[Replica]]  # discovered engine nodes join their engine's list
    router: Router
    money: Money
    cache: PromptCache | None
    metrics: GatewayMetrics
    store: Store  # the shared store (typed sub-stores open from it)
    served_embedder: ServedEmbedder | None  # the classifier's MiniLM, for /v1/embeddings
    readiness: Readiness
    responses: ResponseStore  # stored /v1/responses, per API key
    batches: BatchStore  # files, batches, their lines and the shared line queue
    feedback: Feedback | None = None  # ``routing.feedback``: records, shadows, refits
    bucket: Bucket | None = None  # ``batches.s3``: files over ``batches.store_max_bytes``


@dataclass(frozen=True, slots=True)
class ServingCore:
    config: GatewayConfig  # the snapshot every request on this core runs by
    parts: Collaborators

    def reconfigured(self, config: GatewayConfig) -> ServingCore:
        """The core for a reloaded policy: the same collaborators, the new snapshot."""
        return ServingCore(config, self.parts)

    async def start(self, ask: Ask) -> Run:
        """The request's cache lookups, its tier, and its ``Run`` (not yet admitted).
        The guard goes first: what follows sees the request as its ``guardrails:``
        redacted it (``gateway.guardrails.screen``)."""
        ask, guard = await screen_off_loop(ask, self.config, self.parts.metrics)
        parts = self.parts
        embedding = embedding_of(parts.router, ask.generation)
        probe = None
        if parts.cache is not None:
            generation, control = ask.generation, ask.cache_control
            admits = partial(_admits, self.config, ask)
            probe = parts.cache.probe(
                ask.principal, ask.requested_model, generation, control, embedding, admits
            )
        found = await probe.found() if probe is not None and probe.looks_up else None
        cached = found is not None and found.response is not None
        routed = await route(self.config, parts.router, ask, embedding, cached=cached)
        if guard is not None and guard.local:
            routed = keep_local(routed, guard)
        return Run(
            routed,
            probe,
            found,
            parts.pools,
            parts.money,
            parts.metrics,
            parts.feedback,
            parts.router.sessions,
            guard,
        )

    async def route(self, ask: Ask) -> RoutedRequest:
        """The tier alone, as ``start`` would decide it (``/v1/route``, token counts): no
        cache lookup, and the request is not counted as traffic (nor its guard's findings):
        a ``block`` value is the same 400, a ``local`` one the same in-process tier."""
        ask, guard = await screen_off_loop(ask, self.config)
        embedding = embedding_of(self.parts.router, ask.generation)
        routed = await route(self.config, self.parts.router, ask, embedding, explain=True)
        if guard is not None and guard.local:
            routed = keep_local(routed, guard)
        return routed

    async def embed(
        self, principal: Principal, body: EmbeddingRequest, options: Options
    ) -> Embedded:
        """An embeddings call, whole: its vectors, its ``Outcome`` and its headers."""
        return await embed(self.config, self.parts, principal, body, options)


def _admits(config: GatewayConfig, ask: Ask, hit: CachedResponse) -> bool:
    """A cached answer this request could have had live (its scope, its named or forced
    tier): the probe passes over every other."""
    policy, model, forced = ask.principal.policy, ask.requested_model, ask.forced_tier
    return may_answer(config, policy, model, forced, hit.tier, hit.model)
