"""Build and close the prompt cache (and the embedder it shares) in the lifespan."""

from __future__ import annotations

import asyncio
import logging

from gateway.cache.keys import namespace
from gateway.cache.service import PromptCache
from gateway.cache.storage import open_cache_storage
from policies.schema import GatewayConfig
from policies.store import Store
from routers.embedding import Embedder
from routers.semantic_verify import load_lexicon

log = logging.getLogger(__name__)


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
    storage = await open_cache_storage(store, config.cache)
    await storage.start(sorted({namespace(name) for name in config.tenants}))
    log.info(
        "prompt cache on %s (semantic %s)", storage.kind, "on" if embedder is not None else "off"
    )
    return PromptCache(storage, config.cache, semantic_enabled=embedder is not None), embedder


async def close_cache(cache: PromptCache | None, embedder: Embedder | None) -> None:
    if cache is not None:
        await cache.aclose()
    if embedder is not None:
        await embedder.aclose()


async def _embedder(model_path: str | None) -> Embedder | None:
    """The sentence embedder, or None (exact cache only) where its packages are missing."""
    try:
        from routers.embedding import SentenceTransformerEmbedder

        return await asyncio.to_thread(SentenceTransformerEmbedder, model_path)
    except ImportError as exc:
        log.warning(
            "semantic cache off: %s (install the 'routing' extra for the sentence embedder)", exc
        )
        return None
