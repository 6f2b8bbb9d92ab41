"""The ONNX embedder against the sentence-transformers one: same space, unit vectors."""

from __future__ import annotations

import time

import numpy as np
import pytest

from policies.routing_spec import ClassifierConfig
from routers.embedders import build_embedder
from routers.embedding import (
    SHORT_CHARS,
    EmbeddingOnce,
    SentenceTransformerEmbedder,
    leading_words,
)
from routers.onnx_embedder import OnnxEmbedder, ensure_onnx

TEXTS = [
    "hi",
    "What is the capital of France?",
    "Prove that there are infinitely many primes of the form 4k+3, step by step.",
    "def merge(a, b):\n    return sorted(a + b)  # is this O(n log n)? " * 12,
]


@pytest.fixture(scope="module")
def onnx() -> OnnxEmbedder:
    embedder = build_embedder(ClassifierConfig(max_wait_ms=1))
    assert isinstance(embedder, OnnxEmbedder)
    return embedder


async def test_vectors_are_unit_length_and_batched_calls_agree(onnx: OnnxEmbedder) -> None:
    together = onnx.embed_sync(TEXTS)
    assert together.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-4)
    one_by_one = np.stack([(await onnx.embed([t]))[0] for t in TEXTS])
    assert np.allclose(together, one_by_one, atol=2e-3)  # padding does not leak
    assert onnx.token_counts(TEXTS[-1:])[0] == onnx.max_tokens  # truncated
    once = EmbeddingOnce(onnx, TEXTS[2])
    first = await once.get()
    assert (await once.get()) is first
    assert onnx.batcher.texts >= len(TEXTS) + 1


def test_export_is_cached(onnx: OnnxEmbedder) -> None:
    from pathlib import Path

    from routers.embedding import minilm_path

    path = ensure_onnx(Path(minilm_path()))
    assert path.exists() and path.name.endswith("-int8.onnx")
    assert ensure_onnx(Path(minilm_path())) == path


@pytest.mark.slow
def test_int8_onnx_stays_close_to_torch(onnx: OnnxEmbedder) -> None:
    torch_embedder = SentenceTransformerEmbedder(max_seq_length=128)
    reference = torch_embedder.embed_sync(TEXTS)
    cosine = np.sum(reference * onnx.embed_sync(TEXTS), axis=1)
    assert np.all(cosine > 0.97), cosine
    torch_embedder._batcher.close()


def test_one_intra_op_thread_by_default_and_threads_do_not_change_vectors(
    onnx: OnnxEmbedder,
) -> None:
    assert onnx._session.get_session_options().intra_op_num_threads == 1
    two = OnnxEmbedder(threads=2)
    try:
        assert two._session.get_session_options().intra_op_num_threads == 2
        cosine = np.sum(onnx.embed_sync(TEXTS) * two.embed_sync(TEXTS), axis=1)
    finally:
        two.batcher.close()
    assert np.all(cosine >= 0.9999), cosine


def _pool_prompts(count: int) -> list[str]:
    """Real prompts from the routing pool, the longest first (past SHORT_CHARS)."""
    import csv
    import gzip
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "data" / "routing" / "pool.csv.gz"
    with gzip.open(path, "rt", newline="") as handle:
        prompts = [row["prompt"] for row in csv.DictReader(handle)]
    return sorted(prompts, key=len, reverse=True)[:count]


def test_a_long_text_is_cut_to_its_head_without_changing_its_tokens(onnx: OnnxEmbedder) -> None:
    """The cut text gives the tokenizer's same first ``max_tokens`` ids, on real long
    prompts and on text built to stress it (CJK, punctuation, code, runs of spaces)."""
    head = "Explain, step by step (with code), how the 東京 metro's fares work; " * 40
    built = [
        head + "x" * 5000,
        head + " " * 50_000 + "tail",
        "日本語のテキストを分割する。" * 800,
        "!?.,;:" * 2000,
        "def f(a,b):\n\treturn a[b] + {'k': (1, 2)}\n" * 300,
        "é" * 10_000,
    ]
    long_ones = _pool_prompts(40) + built
    assert all(len(t) > SHORT_CHARS for t in built)
    tokenizer = onnx._tokenizer
    for text in long_ones:
        cut = leading_words(text, onnx.max_tokens)
        assert tokenizer.encode(cut).ids == tokenizer.encode(text).ids, text[:60]
    big = head * 1000  # ~2.7 MB
    cut = leading_words(big, onnx.max_tokens)
    assert len(cut) < 20_000
    started = time.process_time()  # CPU seconds, every thread's: what a busy host cannot stretch
    vectors = onnx.embed_sync([big, cut])
    took = time.process_time() - started
    assert np.allclose(vectors[0], vectors[1], atol=1e-6)
    assert took < 2.0, took  # whole, the 2.7 MB tokenise alone took ~15 s of CPU on this box
