"""The static embedder distilled from MiniLM: the shipped table, its vectors, and the
models shipped for it (routers/static_embedder.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from policies.routing_spec import ClassifierConfig
from routers.classifier import ComplexityModel
from routers.embedders import build_embedder, shipped_model
from routers.embedding import EmbedderUnavailable, leading_words
from routers.quality import QualityModel
from routers.setup import build_routing
from routers.static_embedder import SHIPPED_STATIC, StaticEmbedder, load_table

STATIC = ClassifierConfig(embedder="static", workers=0, embedding_cache=0)


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder:
    return StaticEmbedder()


def test_the_shipped_table_is_small_and_says_where_it_came_from() -> None:
    assert SHIPPED_STATIC.stat().st_size < 8_000_000
    rows, tokenizer, meta = load_table(SHIPPED_STATIC)
    assert rows.shape == (meta["vocab"], meta["dim"]) == (29525, 256)
    assert rows.dtype == np.float32
    assert "all-MiniLM-L6-v2" in meta["teacher"] and "model2vec" in meta["distiller"]
    assert json.loads(tokenizer)["model"]["type"] == "WordPiece"


def test_unit_vectors_same_alone_or_batched_and_meaningful(embedder: StaticEmbedder) -> None:
    texts = [
        "What is the capital of France?",
        "Which city is the capital of France?",
        "How do I bake sourdough bread at home?",
        "hi",
    ]
    batch = embedder.embed_sync(texts)
    assert batch.shape == (4, 256) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    alone = np.concatenate([embedder.embed_sync([t]) for t in texts])
    assert np.array_equal(alone, batch)
    cosine = batch @ batch.T
    assert cosine[0, 1] > 0.8  # a paraphrase
    assert cosine[0, 1] > cosine[0, 2] + 0.5 and cosine[0, 1] > cosine[0, 3] + 0.5


def test_text_without_wordpieces_gives_a_zero_vector(embedder: StaticEmbedder) -> None:
    """Nothing to average: a zero vector, which no cached entry matches (cosine 0)."""
    out = embedder.embed_sync(["", "   "])
    assert not out.any()


def test_only_the_first_max_tokens_count_and_a_huge_text_is_cheap() -> None:
    short = StaticEmbedder(max_tokens=8)
    head = "alpha beta gamma delta epsilon zeta eta theta"
    tail = " completely different words about cooking pasta" * 50
    assert np.array_equal(short.embed_sync([head]), short.embed_sync([head + tail]))
    huge = "word " * 600_000  # 3 MB
    started = time.process_time()
    short.embed_sync([huge])
    assert time.process_time() - started < 0.5  # the tokenizer reads only the head


EDGES = [
    "a\x0bb\x0cc\x1cd\x7fe\x00f\x1f",  # controls the normaliser drops, not splits at
    "tab\tnew\nline\r\nend",
    "don't STOP!!! ... (really) [x] {y} <z> a_b-c ~/`q`",
    "C++ & C#: `code` {a:[1,2]} url http://x.y/z?q=1&b=2 $5.00 50% #tag @you",
    "x" * 150,  # longer than a wordpiece word may be: [UNK], dropped
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "",
    "   ",
    "ünïcode café naïve",  # not ASCII: the tokenizer's own, whole
    "汉字 and ascii",
]


def test_ascii_ids_are_the_tokenizers_own(embedder: StaticEmbedder) -> None:
    """The memoised ASCII path gives exactly the ids ``tokenizers`` gives: on edge cases
    and on every 10th routing prompt the project ships (pool and golden, ~1,800)."""
    from routers.training.datasets import load_golden, load_pool

    prompts = [e.text for e in load_pool()[::10]] + [e.text for e, _ in load_golden()[::10]]
    texts = [leading_words(t, embedder.max_tokens) for t in EDGES + prompts]
    tokenizer = embedder._tokenizer
    expected = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    unk = embedder._unk
    expected = [[i for i in ids if i != unk] for ids in expected]
    assert sum(t.isascii() for t in texts) > 1500
    assert embedder._ids(texts) == expected  # batched: ASCII memoised, the rest encoded
    assert [embedder._ids([t])[0] for t in texts] == expected  # and one at a time
    assert embedder._ascii.ids(EDGES[-1]) is None  # non-ASCII is left to the tokenizer


async def test_inline_and_threaded_paths_agree(embedder: StaticEmbedder) -> None:
    """Short texts are embedded on the caller (cheaper than a thread hop); long ones go
    through the micro-batcher's thread. Same vectors either way."""
    texts = ["Summarise connection pooling.", "Explain Raft leader election. " * 200]
    inline = await embedder.embed(texts[:1])
    threaded = await embedder.embed(texts)
    assert np.array_equal(inline[0], threaded[0])
    assert np.array_equal(threaded, embedder.embed_sync(texts))


def test_the_registry_builds_it_and_a_missing_table_is_unavailable(tmp_path: Path) -> None:
    built = build_embedder(STATIC)
    assert built.name.startswith("static-minilm-256/") and built.name.endswith("/128")
    assert built.dim == 256
    with pytest.raises(EmbedderUnavailable):
        StaticEmbedder(tmp_path / "none.npz")


def test_the_models_shipped_for_it_were_trained_on_its_vectors() -> None:
    name = build_embedder(STATIC).name
    complexity_path = shipped_model(STATIC, "complexity.npz")
    quality_path = shipped_model(STATIC, "quality.npz")
    assert complexity_path is not None and quality_path is not None
    complexity = ComplexityModel.load(complexity_path)
    quality = QualityModel.load(quality_path)
    assert complexity.embedder == quality.embedder == name
    assert complexity.mean.shape[0] == quality.mean.shape[0] == 256 + 20
    assert shipped_model(ClassifierConfig(), "complexity.npz") is None  # MiniLM: the default


async def test_routing_with_it_scores_a_request() -> None:
    from routers.embedding import EmbeddingOnce

    built = build_routing(STATIC, ("small", "medium", "large"))
    messages = [{"role": "user", "content": "Prove that sqrt(2) is irrational."}]
    once = EmbeddingOnce(built.embedder, "Prove that sqrt(2) is irrational.")
    score = await built.classifier.classify(messages, once)
    assert 0.0 < score.score < 1.0
    assert score.quality is not None and len(score.quality) == 3
    await built.embedder.aclose()
