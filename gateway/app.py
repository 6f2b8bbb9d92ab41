"""The application: a lifespan that builds (and closes) everything, and the route table.

Nothing is built at import time; ``create_app(config)`` is cheap and pure, the
lifespan does the work, and the app is frozen once started.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider

from backends.pool import EnginePool, PoolSettings, Replica
from backends.registry import build_engine
from gateway.admin import endpoints as admin
from gateway.admin.auth import weak_admin_key
from gateway.batches import endpoints as batches
from gateway.batches.runner import BatchRunner
from gateway.cache.build import close_cache, open_cache
from gateway.chat import endpoints as chat
from gateway.cluster.deployment import join_cluster
from gateway.cluster.reload import install_sighup, remove_sighup
from gateway.completions import endpoints as completions
from gateway.core.serving_core import Collaborators, ServingCore
from gateway.edge.error_boundary import install_error_handling
from gateway.edge.family import Family, formats_by_path
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import GatewayApp
from gateway.embeddings import endpoints as embeddings
from gateway.explain import endpoints as explain
from gateway.feedback import endpoints as feedback
from gateway.learning.build import open_feedback
from gateway.mcp import endpoints as mcp
from gateway.mcp.service import open_mcp
from gateway.messages import endpoints as messages
from gateway.models import endpoints as models
from gateway.money.hold import Money
from gateway.ops import endpoints as ops
from gateway.responses import endpoints as responses
from gateway.state import GatewayState
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.tracing import open_tracing
from gateway.throttle import GuessThrottle
from gateway.types import Readiness
from policies.engine_spec import PoolSpec
from policies.schema import GatewayConfig
from policies.stores.batch_bucket import Bucket
from policies.stores.factories import (
    open_audit,
    open_batch_store,
    open_budget_store,
    open_key_store,
    open_ledger,
    open_rate_limiter,
    open_session_store,
    open_share_store,
    open_store,
)
from policies.stores.key_directory import KeyDirectory
from policies.stores.responses import ResponseStore
from policies.stores.settle_journal import SettleJournal
from policies.stores.store import Store, StoreUnavailable
from policies.tenants import KeyRing
from routers.live_sessions import Sessions
from routers.objective_lambda import ObjectiveLambda
from routers.router import Router
from routers.setup import RoutingModels
from routers.target_share import TargetShares
from routers.wordpiece import ServedEmbedder

log = logging.getLogger(__name__)

# The endpoint families the app mounts, in the order their routes match.
FAMILIES: tuple[Family, ...] = (
    chat.FAMILY,
    completions.FAMILY,
    responses.FAMILY,
    batches.FAMILY,  # before messages: /v1/messages/batches is its own
    messages.FAMILY,
    embeddings.FAMILY,
    models.FAMILY,
    explain.FAMILY,
    feedback.FAMILY,
    ops.FAMILY,
    admin.FAMILY,
    mcp.FAMILY,
)
# What a batch line's path runs through: the format its family declares for it.
FORMATS = formats_by_path(FAMILIES)

# Allocations (net of frees) that start a young-generation collection; CPython's 700 is
# passed by the bursts of a few concurrent requests, whose live objects then get scanned
# (and promoted, so full collections follow): ~10% more passthrough CPU and hundreds of
# pauses a second (bench/experiments/gc_ab.py). The price of 50,000 is a long pause
# (tens of ms: every stream waits) when one does run, which only objects left in
# reference cycles bring about: a request leaves none (tests/gateway/test_reference_cycles.py;
# docs/performance.md, "GC pauses and the stall"; ``tiergate_gc_pause_seconds`` shows any).
GC_YOUNG_THRESHOLD = 50_000


async def build_state(
    config: GatewayConfig, tracer_provider: TracerProvider | None = None
) -> GatewayState:
    store = open_store(config)
    replicas: dict[str, list[Replica]] = {}
    for name, spec in config.engines.items():
        replicas[
            name
        ] = []  # with ``discover``: filled by gateway.cluster.deployment as nodes are found
        for i in range(spec.replicas if spec.discover is None else 0):
            builder = partial(
                build_engine,
                spec.backend,
                f"{name}-{i}",
                spec.model,
                spec.options,
                spec.default_max_tokens,
            )
            replicas[name].append(Replica(builder(), spec.max_inflight, builder=builder))
    engines = [r.engine for group in replicas.values() for r in group]
    await asyncio.gather(*(engine.start() for engine in engines))
    pools = {
        tier_name: EnginePool(
            tier_name, [r for e in tier.engines for r in replicas[e]], pool_settings(tier.pool)
        )
        for tier_name, tier in config.tiers.items()
    }
    ledger = open_ledger(config, store)
    notes: list[str] = []
    routing = await _load_classifier(config, notes)
    shared = routing.embedder if routing is not None else None
    cache, embedder = await open_cache(config, store, shared)
    classifier = routing.classifier if routing is not None else None
    keyring = KeyRing.from_config(config)
    budgets = open_budget_store(config, store, ledger)
    journal = SettleJournal(budgets, journal_dir(config, store))
    await asyncio.to_thread(journal.open)
    # Settlements and sketch syncs run as their own tasks so a cancelled request still
    # settles; the lifespan waits for them before closing the store.
    background: set[asyncio.Task[None]] = set()
    feedback = await open_feedback(config, store, pools, budgets, journal, classifier, notes)
    reference = routing.quality.reference_traffic() if routing and routing.quality else None
    router = Router(
        classifier,
        embedder or shared,  # one embedder: the cache and the classifier share it
        TargetShares(open_share_store(store)),
        replicas,
        background,
        ObjectiveLambda(open_share_store(store), reference),
        feedback,  # the serving refit, read once per request
        Sessions(open_session_store(store), pools, background),
    )
    parts = Collaborators(
        pools=pools,
        replicas=replicas,
        router=router,
        money=Money(budgets, open_rate_limiter(config, store), journal, ledger, background),
        cache=cache,
        metrics=GatewayMetrics(config),
        store=store,
        served_embedder=await _served_embedder(config, routing, notes),
        readiness=Readiness(),
        responses=ResponseStore(store),
        batches=open_batch_store(store),
        feedback=feedback,
        bucket=Bucket(config.batches.s3) if config.batches.s3 is not None else None,
    )
    return GatewayState(
        core=ServingCore(config, parts),
        keyring=keyring,
        keys=KeyDirectory(open_key_store(store), config, keyring),
        audit=open_audit(store),
        tracing=open_tracing(tracer_provider),
        notes=notes,
        admin_guesses=GuessThrottle(
            config.admin.failures_per_minute, config.admin.failures_per_minute_total
        ),
    )


def journal_dir(config: GatewayConfig, store: Store) -> Path | None:
    """Where this process journals refused settles (None in process: that store never
    refuses, and nothing outlives the process anyway)."""
    if store.kind == "memory" or config.redis_url is None:
        return None
    if config.budgets.journal_dir is not None:
        root = Path(config.budgets.journal_dir).expanduser()
    else:
        state_dir = os.environ.get("TIERGATE_STATE_DIR") or "~/.local/state/tiergate"
        root = Path(state_dir).expanduser() / "journal"
    # One folder per Redis and key prefix: a journal is only ever replayed into the store
    # it was written for (the URL's password is not part of the name).
    where = urlsplit(config.redis_url)
    server = f"{where.hostname}:{where.port}{where.path}|{config.redis_prefix}"
    return root / hashlib.sha256(server.encode()).hexdigest()[:16]


async def replay_journal(state: GatewayState) -> None:
    """What an earlier run (or a dead neighbour) could not settle, then every period."""
    journal = state.parts.money.journal
    if journal.pending:
        await journal.replay()
    await journal.run(state.config.budgets.journal_replay_s)


async def poll_keys(state: GatewayState) -> None:
    """Keep API-managed keys in step with the store (revocations reach this replica)."""
    try:
        await state.keys.refresh()
    except StoreUnavailable as exc:
        log.warning("key store unreachable at startup: %s", exc)
    await state.keys.run()


def pool_settings(spec: PoolSpec) -> PoolSettings:
    return PoolSettings(
        queue_weight=spec.weights.queue,
        kv_weight=spec.weights.kv_cache,
        prefix_weight=spec.weights.prefix,
        max_waiting=spec.max_waiting,
        wait_timeout_s=spec.wait_timeout_s,
        retry_after_s=spec.retry_after_s,
        prefix_block_chars=spec.prefix_block_chars,
        prefix_index_blocks=spec.prefix_index_blocks,
        rebuild_dead=spec.rebuild_dead,
        batch_share=spec.batch_share,
        preempt_after_s=spec.preempt_after_s,
    )


async def _load_classifier(config: GatewayConfig, notes: list[str]) -> RoutingModels | None:
    """The embedder and classifier for ``auto``; without them, ``auto`` means the tenant's
    default tier, and the gateway says so loudly."""
    spec = config.routing.classifier
    if spec is None:
        notes.append("no classifier configured: model 'auto' uses the tenant default tier")
        return None
    from routers.classifier import ModelFormatError
    from routers.embedding import EmbedderUnavailable
    from routers.quality import QualityFormatError
    from routers.setup import build_routing

    objective = config.routing.objective
    reference = objective.reference if objective is not None else None
    try:
        built = await asyncio.to_thread(build_routing, spec, tuple(config.tiers), reference)
    except (EmbedderUnavailable, ModelFormatError, QualityFormatError) as exc:
        note = f"complexity classifier unavailable ({exc}): 'auto' uses the tenant default tier"
        log.error("%s", note)
        notes.append(note)
        return None
    from routers.cpu import cpu_summary

    log.info("complexity classifier ready (%s; CPU %s)", built.embedder.name, cpu_summary())
    return built


async def _served_embedder(
    config: GatewayConfig, routing: RoutingModels | None, notes: list[str]
) -> ServedEmbedder | None:
    """The classifier's embedder for ``/v1/embeddings``, when a model there is local. The
    model served there is MiniLM: under the static embedder (routing's own, distilled from
    it, other vectors), MiniLM is loaded beside it for this route."""
    spec = config.routing.classifier
    if spec is None or not any(e.engine is None for e in config.embeddings.values()):
        return None
    if routing is None:
        note = "the in-process embedding model is off: the classifier's embedder failed"
        log.error("%s", note)
        notes.append(note)
        return None
    from routers.embedding import EmbedderUnavailable
    from routers.setup import serving_embedder
    from routers.wordpiece import serve_embedder

    try:
        embedder = routing.embedder
        if spec.embedder == "static":
            minilm = spec.model_copy(update={"embedder": "onnx"})
            embedder = await asyncio.to_thread(serving_embedder, minilm)
        return await asyncio.to_thread(serve_embedder, embedder, spec.max_tokens)
    except EmbedderUnavailable as exc:
        log.error("the in-process embedding model is off: %s", exc)
        notes.append(f"the in-process embedding model is off: {exc}")
        return None


async def close_state(state: GatewayState) -> None:
    parts = state.parts
    if parts.feedback is not None:
        await parts.feedback.aclose(state.config)
    if parts.money.background:
        await asyncio.wait(set(parts.money.background), timeout=10)
    replicas = [r for group in parts.replicas.values() for r in group]
    await asyncio.gather(*(r.aclose() for r in replicas), return_exceptions=True)
    await close_cache(parts.cache, parts.router.embedder)
    served = parts.served_embedder
    if served is not None and served.embedder is not parts.router.embedder:
        await served.embedder.aclose()  # MiniLM beside the static embedder
    journal = parts.money.journal
    if journal.pending:  # one last try; what is left is replayed at the next start
        await journal.replay()
    journal.close()
    await parts.store.aclose()
    await asyncio.to_thread(state.tracing.shutdown)


def create_app(
    config: GatewayConfig,
    config_source: Callable[[], GatewayConfig] | None = None,
    *,
    tracer_provider: TracerProvider | None = None,
) -> FastAPI:
    """``config_source`` re-reads the config file: policies reload from it (SIGHUP, admin).
    ``tracer_provider``: trace into this provider instead of following ``OTEL_*`` (tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        weak = weak_admin_key(config)
        if weak is not None:
            raise RuntimeError(weak)
        state = await build_state(config, tracer_provider)
        if state.parts.router.objective is not None:  # λ's prior, before the first request
            await state.parts.router.objective.prepare(config)
        state.config_source = config_source
        app.state.tiergate = state
        app.state.tiergate_cluster = cluster = await join_cluster(state)
        stack = AsyncExitStack()  # what is entered here is left in this task, last first
        mcp_service = open_mcp(
            config, state.parts.metrics.registry, state.tracing, state.audit, app.version
        )
        app.state.tiergate_mcp = mcp_service
        state.on_reload.append(mcp_service.reconfigure)
        await stack.enter_async_context(mcp_service.running())
        reloads: set[asyncio.Task[None]] = set()
        hup = config_source is not None and install_sighup(state, reloads)
        loops = [asyncio.create_task(poll_keys(state)), asyncio.create_task(replay_journal(state))]
        if state.parts.feedback is not None:  # records, the serving model, refits
            loops.append(asyncio.create_task(state.parts.feedback.run(lambda: state.config)))
        runner = BatchRunner(lambda: state.core, FORMATS, state.keys, state.tracing)  # batch lines
        loops.append(asyncio.create_task(runner.run()))
        state.parts.readiness.ready = True
        # Long-lived startup objects leave the GC's young generations: shorter pauses later.
        gc.collect()
        gc.freeze()
        thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
        stack.enter_context(state.parts.metrics.gc_pauses.watching())  # /metrics: GC pauses
        log.info(
            "tiergate ready: tiers %s, store %s", list(state.parts.pools), state.parts.store.kind
        )
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            state.parts.readiness.ready = False
            for loop_task in loops:
                loop_task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            if hup:
                remove_sighup()
            await stack.aclose()  # /mcp: its sessions, then its upstreams (processes stopped)
            await cluster.aclose()
            await close_state(state)

    app = GatewayApp(
        title="tiergate",
        summary="OpenAI-compatible gateway: cheapest capable tier, shared cache, budgets",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.router.route_class = GatewayEndpoint
    app.bodies = [body for family in FAMILIES for body in family.bodies]
    shapes = [(f.prefix, f.errors) for f in FAMILIES if f.prefix and f.errors is not None]
    install_error_handling(app, shapes)
    for family in FAMILIES:
        for endpoints in family.endpoints:
            app.include_router(endpoints)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tiergate")
    except PackageNotFoundError:
        return "0"
