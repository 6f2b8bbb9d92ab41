"""The embedder in worker processes: same vectors as in process, restarted on death or a
stuck batch (callers fail over, never hang), and the LRU of repeated prompts."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from policies.routing_spec import ClassifierConfig
from routers.batching import EmbeddingFailed
from routers.embed_cache import CachedEmbedder
from routers.embed_worker import ProcessEmbedder
from routers.embedders import build_embedder
from routers.setup import serving_embedder

TEXTS = ["hi", "What is the capital of France?", "Prove that sqrt(2) is irrational."]


@pytest.fixture
async def workers() -> AsyncIterator[ProcessEmbedder]:
    embedder = ProcessEmbedder(ClassifierConfig(max_wait_ms=1, worker_timeout_s=1.0))
    yield embedder
    await embedder.aclose()


async def test_worker_vectors_match_the_in_process_embedder(workers: ProcessEmbedder) -> None:
    local = build_embedder(ClassifierConfig(workers=0))
    try:
        expected = local.embed_sync(TEXTS)
    finally:
        await local.aclose()
    assert workers.name == local.name and workers.dim == 384
    assert workers.pids and all(pid != os.getpid() for pid in workers.pids)
    together = await asyncio.gather(*(workers.embed([t]) for t in TEXTS))
    assert np.allclose(np.concatenate(together), expected, atol=1e-5)
    assert np.allclose(workers.embed_sync(TEXTS), expected, atol=1e-5)


async def test_a_killed_worker_fails_its_batch_and_is_restarted(workers: ProcessEmbedder) -> None:
    before = workers.pids[0]
    os.kill(before, signal.SIGKILL)
    with pytest.raises(EmbeddingFailed, match="died"):
        await workers.embed(["after the kill"])
    assert workers.workers[0].restarts == 1 and workers.pids[0] != before
    assert (await workers.embed(["served again"])).shape == (1, 384)


async def test_a_stuck_worker_times_out_instead_of_hanging(workers: ProcessEmbedder) -> None:
    stuck = workers.pids[0]
    os.kill(stuck, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(EmbeddingFailed, match="stuck"):
        await asyncio.wait_for(workers.embed(["while stopped"]), timeout=30)
    assert time.monotonic() - started < 10  # 1 s timeout + a restart, not forever
    assert workers.pids[0] != stuck
    assert (await workers.embed(["served again"])).shape == (1, 384)


async def test_two_workers_serve_one_batcher() -> None:
    embedder = ProcessEmbedder(ClassifierConfig(workers=2, max_batch=4, max_wait_ms=1))
    try:
        assert len(set(embedder.pids)) == 2
        texts = [f"prompt {i} about queues" for i in range(24)]
        vectors = await asyncio.gather(*(embedder.embed([t]) for t in texts))
        assert np.allclose(np.concatenate(vectors), embedder.embed_sync(texts), atol=1e-5)
        assert embedder.batcher.texts == 24 and embedder.batcher.batches >= 6
    finally:
        await embedder.aclose()


class CountingEmbedder:
    """A deterministic embedder that counts the texts it was asked for."""

    name = "counting"
    dim = 4

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.seen.extend(texts)
        rows = [[len(t), sum(map(ord, t)) % 97, 1.0, 0.0] for t in texts]
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-9)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_sync(texts)

    async def aclose(self) -> None:
        return None


async def test_repeated_prompts_are_embedded_once_and_the_cache_is_bounded() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, size=2)
    first = await cached.embed(["a", "bb", "a"])
    assert inner.seen == ["a", "bb", "a"]  # both "a" missed: looked up before the batch ran
    again = await cached.embed(["bb", "a"])
    assert inner.seen == ["a", "bb", "a"] and cached.hits == 2
    assert np.array_equal(again, first[[1, 0]])
    await cached.embed(["ccc"])  # evicts the least recently used ("bb")
    assert cached.entries == 2
    await cached.embed(["a", "bb"])
    assert inner.seen[-1:] == ["bb"] and cached.misses == 5
    assert np.array_equal(cached.embed_sync(["a"]), first[:1])


async def test_the_serving_embedder_is_cached_workers() -> None:
    embedder = serving_embedder(ClassifierConfig(max_wait_ms=1, embedding_cache=16))
    try:
        assert isinstance(embedder, CachedEmbedder)
        assert isinstance(embedder.inner, ProcessEmbedder)
        one = await embedder.embed(["repeat me"])
        two = await embedder.embed(["repeat me"])
        assert np.array_equal(one, two) and embedder.hits == 1
        assert embedder.inner.batcher.texts == 1
    finally:
        await embedder.aclose()


def test_a_dead_worker_sends_auto_to_the_default_tier_then_recovers() -> None:
    from tests.gateway.routing.test_auto_routing import HARD, chat, classifier_config, explain
    from tiergate_testing.configs import TEST_KEY
    from tiergate_testing.gateways import running_gateway

    config = classifier_config()
    config["tenants"]["acme"]["default_tier"] = "medium"
    config["routing"]["classifier"]["embedding_cache"] = 0  # every request reaches a worker
    with running_gateway(config) as gateway:
        shared = gateway.state.parts.router.embedder
        assert isinstance(shared, ProcessEmbedder)
        os.kill(shared.pids[0], signal.SIGKILL)
        failed = explain(gateway, TEST_KEY, chat(HARD)).json()
        assert failed["tier"] == "medium" and failed["score"] is None
        assert "classification failed" in failed["trail"][0]
        served = explain(gateway, TEST_KEY, chat(HARD + " again")).json()
        assert served["score"] is not None  # the restarted worker answers
        assert shared.workers[0].restarts == 1


PAIRS = [
    ("How do I keep basil fresh?", "What is the best way to store fresh basil?"),
    ("How do I keep basil fresh?", "How do I grow basil from seed?"),
]


async def test_the_verifier_runs_in_the_worker_and_survives_a_restart(
    workers: ProcessEmbedder,
) -> None:
    from routers.verifier.model import MODEL_DIR, CrossEncoderVerifier
    from routers.verifier.scorer import build_pair_scorer

    expected = CrossEncoderVerifier().score(PAIRS)
    scorer = build_pair_scorer(CachedEmbedder(workers, 16))  # unwraps to the workers
    assert scorer.where == "worker"
    assert np.allclose(await scorer.score(PAIRS), expected, atol=1e-4)
    os.kill(workers.pids[0], signal.SIGKILL)
    with pytest.raises(EmbeddingFailed):  # "died", or "stuck" when the kill lands late
        await scorer.score(PAIRS)
    assert workers.workers[0].restarts == 1
    # The restarted worker has the verifier again, without being asked.
    assert np.allclose(await scorer.score(PAIRS), expected, atol=1e-4)
    assert workers.workers[0].verifier_dir == str(MODEL_DIR)
