"""One probe per request: each lookup is made once, whoever asks and however often (the
exact one before classification, the semantic one after), on the in-process storage
counted by a wrapper of the same protocol."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from backends.base import GenerationRequest, SamplingParams, Usage
from gateway.cache.record import CachedResponse
from gateway.cache.service import CacheProbe, PromptCache
from policies.schema import CacheConfig, GatewayConfig
from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.memory import MemoryStorage
from policies.stores.cache.storage import Candidate, Semantic, TenantUsage, Vector
from policies.tenants import KeyRing, Principal
from routers.embedding import EmbeddingOnce
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config


class CountingStorage:
    """``MemoryStorage``, counting the calls a request's lookups make."""

    kind = "memory"

    def __init__(self) -> None:
        self.inner = MemoryStorage()
        self.gets = self.searches = self.puts = 0

    async def start(self, namespaces: list[str]) -> None:
        await self.inner.start(namespaces)

    async def get(self, keys: CacheKeys, digest: str) -> bytes | None:
        self.gets += 1
        return await self.inner.get(keys, digest)

    async def put(
        self,
        keys: CacheKeys,
        digest: str,
        record: bytes,
        semantic: Semantic | None,
        ttl_s: float,
        max_entries: int,
    ) -> None:
        self.puts += 1
        await self.inner.put(keys, digest, record, semantic, ttl_s, max_entries)

    async def candidates(
        self, keys: CacheKeys, prefix: str, vector: Vector, count: int
    ) -> list[Candidate]:
        self.searches += 1
        return await self.inner.candidates(keys, prefix, vector, count)

    async def flush(self, keys: CacheKeys) -> int:
        return await self.inner.flush(keys)

    async def usage(self, keys: CacheKeys) -> TenantUsage:
        return await self.inner.usage(keys)

    async def add_stats(self, keys: CacheKeys, fields: dict[str, float]) -> None:
        await self.inner.add_stats(keys, fields)

    async def read_stats(self, keys: CacheKeys) -> dict[str, float]:
        return await self.inner.read_stats(keys)

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingEmbedder:
    dim = 4

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        return np.full((len(texts), self.dim), 0.5, dtype=np.float32)

    async def aclose(self) -> None:
        return None


def principal() -> Principal:
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    os.environ.setdefault("TIERGATE_OTHER_KEY", OTHER_KEY)
    raw = fake_config()
    raw["tenants"]["acme"]["cache"] = {"max_temperature": 2.0}
    found = KeyRing.from_config(GatewayConfig.model_validate(raw)).authenticate(TEST_KEY)
    assert found is not None
    return found


def request(text: str) -> GenerationRequest:
    messages = ({"role": "user", "content": text},)
    return GenerationRequest("chatcmpl-1", "auto", SamplingParams(max_tokens=8), messages)


def probe(cache: PromptCache, embedder: CountingEmbedder, text: str) -> CacheProbe:
    made = cache.probe(principal(), "auto", request(text), None, EmbeddingOnce(embedder, text))
    assert made is not None
    return made


ANSWER = CachedResponse(("Hi", " there"), "stop", Usage(5, 2), None, "fake-small", "small", 1e-6)


async def test_each_lookup_runs_once_however_often_it_is_asked() -> None:
    storage, embedder = CountingStorage(), CountingEmbedder()
    cache = PromptCache(storage, CacheConfig(), semantic_enabled=True)
    first = probe(cache, embedder, "What is a hash map?")
    assert (await first.exact()).status == "miss"
    assert (await first.exact()).status == "miss"  # routing asked; asking again is free
    assert storage.gets == 1 and embedder.calls == 0  # the exact key needs no vector
    for _ in range(2):
        assert (await first.found()).status == "miss"
    assert (storage.gets, storage.searches, embedder.calls) == (1, 1, 1)
    assert await first.store(ANSWER)
    assert embedder.calls == 1  # the stored vector is the one the lookup computed
    assert cache.counters.misses == 1 and cache.counters.stored == 1

    again = probe(cache, embedder, "What is a hash map?")
    found = await again.found()  # without an exact() first: it makes that lookup itself
    assert found.status == "exact" and found.response == ANSWER
    assert (await again.exact()) is not None and storage.gets == 2
    assert storage.searches == 1  # an exact hit searches nothing

    near = probe(cache, embedder, "Please, what is a hash map?")
    assert (await near.found()).status == "semantic"  # same vector, same prefix
    assert (await near.found()).status == "semantic"
    assert (storage.gets, storage.searches) == (3, 2)
    near.saved(0.5)
    assert cache.counters.saved_usd == 0.5


async def test_a_hit_is_counted_when_it_is_served_never_when_it_is_only_found() -> None:
    """The core looks up before admission; a request refused there took no hit, and a hit
    a budget downgrade declines is counted as refused, not as a hit taken back."""
    storage, embedder = CountingStorage(), CountingEmbedder()
    cache = PromptCache(storage, CacheConfig(), semantic_enabled=True)
    assert await probe(cache, embedder, "What is a trie?").store(ANSWER)
    counters = cache.counters
    refused = probe(cache, embedder, "What is a trie?")  # then refused at admission
    assert (await refused.found()).status == "exact" and counters.exact_hits == 0
    taken = probe(cache, embedder, "What is a trie?")
    taken.served(await taken.found())
    assert counters.exact_hits == 1
    near = probe(cache, embedder, "Tell me, what is a trie?")
    near.served(await near.found())
    assert (counters.semantic_hits, counters.semantic_by_tenant) == (1, {"acme": 1})
    declined = probe(cache, embedder, "What is a trie?")
    assert (await declined.found()).status == "exact"
    assert declined.decline("budget").status == "miss"
    assert (await declined.found()).status == "miss"  # the run's answer from now on
    assert (counters.exact_hits, counters.semantic_hits) == (1, 1)
    assert counters.refused_by_reason == {"budget": 1}
    shared = await cache.tenant_stats("acme")  # what every replica's admin API sums
    assert shared == {"lookups": 4, "exact_hits": 1, "semantic_hits": 1, "refused:budget": 1}


async def test_no_cache_directives_look_nothing_up() -> None:
    embedder = CountingEmbedder()
    text = "Anything"
    once = EmbeddingOnce(embedder, text)
    storage = CountingStorage()
    cache = PromptCache(storage, CacheConfig(), semantic_enabled=True)
    skipping = cache.probe(principal(), "auto", request(text), "no-cache", once)
    assert skipping is not None and not skipping.looks_up  # it may still store
    assert cache.probe(principal(), "auto", request(text), "no-cache, no-store", once) is None
    assert storage.gets == 0 and storage.searches == 0
