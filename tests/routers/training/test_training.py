"""Training is deterministic, the artifact is plain arrays, operator files follow the schema."""

from __future__ import annotations

import hashlib
import json
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from routers.classifier import (
    SHIPPED_MODEL,
    ComplexityClassifier,
    ComplexityModel,
    ModelFormatError,
)
from routers.features import FEATURES, prompt_messages, text_features
from routers.training import datasets
from routers.training.complexity_fit import TrainOptions, family_folds, fit


def small_slice(n: int = 160) -> list[datasets.Example]:
    train = [e for e in datasets.shared_splits().train if e.label is not None]
    step = max(len(train) // n, 1)
    return train[::step][:n]


def fake_vectors(examples: list[datasets.Example]) -> np.ndarray:
    """Deterministic stand-in vectors (the real embedder is exercised in test_embedder)."""
    rows = []
    for e in examples:
        rng = np.random.default_rng(zlib.crc32(e.text.encode()))
        v = rng.standard_normal(384).astype(np.float32)
        rows.append(v / np.linalg.norm(v))
    return np.stack(rows)


def test_same_seed_same_model_and_scores(tmp_path: Path) -> None:
    examples = small_slice()
    vectors = fake_vectors(examples)
    first = fit(examples, vectors, "test-embedder", TrainOptions(seed=7))
    second = fit(examples, vectors, "test-embedder", TrainOptions(seed=7))
    for name in ("mean", "scale", "coef", "intercept"):
        assert np.array_equal(getattr(first, name), getattr(second, name))
    first.save(tmp_path / "a.npz")
    second.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    texts = [e.text for e in examples]
    conversations = [e.messages for e in examples]
    a = ComplexityClassifier(ComplexityModel.load(tmp_path / "a.npz"))
    b = ComplexityClassifier(ComplexityModel.load(tmp_path / "b.npz"))
    assert [s.score for s in a.classify_many(conversations, texts, vectors)] == [
        s.score for s in b.classify_many(conversations, texts, vectors)
    ]


def test_artifact_is_arrays_and_json_without_pickles(tmp_path: Path) -> None:
    examples = small_slice(80)
    model = fit(examples, fake_vectors(examples), "test-embedder")
    path = tmp_path / "m.npz"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        assert sorted(archive.namelist()) == sorted(
            ["meta.npy", "mean.npy", "scale.npy", "coef.npy", "intercept.npy"]
        )
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(bytes(data["meta"]).decode())
    assert meta["features"] == list(FEATURES)
    assert meta["embedder"] == "test-embedder"


def test_shipped_model_loads_is_small_and_scores_in_unit_interval() -> None:
    assert SHIPPED_MODEL.stat().st_size < 5 * 1024 * 1024
    model = ComplexityModel.load()
    assert model.embedder.startswith("all-minilm-l6-v2/onnx-int8/")
    vectors = np.zeros((2, 384), dtype=np.float32)
    feats = np.stack(
        [text_features(prompt_messages(t), t) for t in ("hi", "Prove that sqrt(2) is irrational.")]
    )
    probs = model.probabilities(vectors, feats)
    assert probs.shape == (2, len(model.heads))
    assert np.all((probs > 0) & (probs < 1))


def test_a_model_for_other_features_is_refused(tmp_path: Path) -> None:
    model = ComplexityModel.load()
    other = ComplexityModel(
        model.embedder,
        ("only_one",),
        model.heads,
        model.mean,
        model.scale,
        model.coef,
        model.intercept,
        {},
    )
    other.save(tmp_path / "other.npz")
    with pytest.raises(ModelFormatError, match="other features"):
        ComplexityModel.load(tmp_path / "other.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ModelFormatError):
        ComplexityModel.load(tmp_path / "junk.npz")


def test_operator_files_csv_and_jsonl(tmp_path: Path) -> None:
    csv_file = tmp_path / "traffic.csv"
    csv_file.write_text(
        "prompt,label,weight\nWhat is 2+2?,0,\nProve Fermat's last theorem for n=3.,1,2.5\n"
    )
    rows = datasets.load_operator(csv_file)
    assert [(r.label, r.weight, r.text) for r in rows] == [
        (0.0, 1.0, "What is 2+2?"),
        (1.0, 2.5, "Prove Fermat's last theorem for n=3."),
    ]
    jsonl = tmp_path / "traffic.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": "hello"}], "tier_min": 0},
        {"prompt": "derive the Black-Scholes PDE", "small_correct": 0, "large_correct": 1},
        {"prompt": "what day is it", "tier_min": -1},
    ]
    jsonl.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rows = datasets.load_operator(jsonl)
    assert [r.label for r in rows] == [0.0, 1.0, 0.0]
    assert (rows[1].weak, rows[1].strong) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "x"}\n{"prompt": "y", "label": 1}\n', "needs 'label'"),
        ('{"label": 1}\n', "needs 'prompt' or 'messages'"),
        ('{"prompt": "a", "label": 0}\n{"prompt": "b", "label": 0}\n', "both labels"),
        ('{"prompt": "a", "label": 3}\n', r"\[0, 1\]"),
        ("{not json\n", "invalid JSON"),
    ],
)
def test_operator_file_errors_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(datasets.DataError, match=message):
        datasets.load_operator(path)


def test_golden_split_is_fixed_and_disjoint() -> None:
    splits = datasets.shared_splits()
    train_texts = {e.text for e in splits.train if e.source == "golden"}
    test_texts = {e.text for e in splits.golden_test}
    assert train_texts.isdisjoint(test_texts)
    assert 0.4 < len(test_texts) / (len(test_texts) + len(train_texts)) < 0.6
    assert not any(e.benchmark in datasets.HELD_OUT_BENCHMARKS for e in splits.train)


class CountingEmbedder:
    """The ``SyncEmbedder`` protocol over deterministic vectors, counting texts embedded."""

    dim = 384
    name = "counting"

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.embedded += texts
        return fake_vectors(
            [datasets.Example(tuple(prompt_messages(t)), 0.0, 1.0, "b", "s") for t in texts]
        )

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_sync(texts)

    async def aclose(self) -> None:
        return None


def test_embedding_cache_embeds_each_text_once(tmp_path: Path) -> None:
    from routers.training.batch import cached_embed, embed_texts

    embedder = CountingEmbedder()
    path = tmp_path / "cache.npz"
    # "prompt 396"'s key ends in a NUL byte, which bytes() of a numpy "S16" item drops
    texts = [f"prompt {i}" for i in range(200, 500)]
    assert hashlib.sha256(b"prompt 396").digest()[15] == 0
    first = cached_embed(embedder, texts, path)
    assert len(embedder.embedded) == 300
    again = cached_embed(embedder, ["new one", *texts[::-1], "new one"], path)
    assert embedder.embedded[300:] == ["new one"]
    assert np.array_equal(again[1:-1], first[::-1])
    assert np.array_equal(again[0], again[-1])
    assert np.array_equal(first, embed_texts(CountingEmbedder(), texts))


def test_family_folds_keep_each_benchmark_whole() -> None:
    families = ["a"] * 5 + ["b"] * 3 + ["c"] * 3 + ["d"]
    folds = family_folds(families, 3)
    rows = sorted(int(i) for fold in folds for i in fold)
    assert rows == list(range(len(families)))
    for fold in folds:
        inside = {families[i] for i in fold}
        assert all(families[i] not in inside for other in folds if other is not fold for i in other)


def test_calibration_beats_the_raw_ranker_on_held_out_families() -> None:
    from routers.training.evaluation import calibration

    rows = [e for e in small_slice(600) if e.source != "RouteLLM/gsm8k_train(unlabeled)"]
    held = {"mmlu", "arc-challenge", "gsm8k"}
    train = [e for e in rows if datasets.family(e.benchmark) not in held]
    test = [e for e in rows if datasets.family(e.benchmark) in held]
    feats = np.stack([text_features(e.messages, e.text) for e in test])
    labels = np.array([e.label for e in test], dtype=np.float64)
    errors = {}
    for folds in (3, 0):
        model = fit(train, fake_vectors(train), "t", TrainOptions(calibration_folds=folds))
        p = model.probabilities(fake_vectors(test), feats)[:, 0].astype(np.float64)
        errors[folds] = (calibration(p, labels).ece, float(np.mean((p - labels) ** 2)))
    # random stand-in vectors overfit: out of family the raw logistic is overconfident,
    # the stacked out-of-family fit shrinks it towards what it can actually predict
    assert errors[3][0] < errors[0][0] - 0.1
    assert errors[3][1] < errors[0][1] - 0.1


def test_golden_large_fits_the_large_head_on_the_golden_rows_too() -> None:
    """Golden rows carry no three-tier label; with ``golden_large`` their "Mixtral wrong,
    GPT-4 right" (Mixtral = the medium tier, GPT-4 = the large one) joins P(needs large),
    and the main score is left exactly as it was."""
    from routers.classifier import HEAD_LARGE

    three_tier = [e for e in datasets.shared_splits().train if e.large is not None]
    pool = three_tier[:: max(len(three_tier) // 250, 1)][:250]
    golden = [e for e, held in datasets.load_golden() if not held][:250]
    assert len(pool) >= 200 and all(e.large is None for e in golden)
    examples = pool + golden
    vectors = fake_vectors(examples)
    plain = fit(examples, vectors, "t", TrainOptions(calibration_folds=0))
    both = fit(examples, vectors, "t", TrainOptions(calibration_folds=0, golden_large=True))
    assert plain.heads == both.heads and HEAD_LARGE in both.heads
    assert np.array_equal(plain.coef[0], both.coef[0])
    assert not np.allclose(plain.coef[1], both.coef[1])
    assert both.info["golden_large"] is True and plain.info["golden_large"] is False
    # the golden rows' labels reached the large head (in sample: it has seen them)
    p = both.probabilities(
        fake_vectors(golden), np.stack([text_features(e.messages, e.text) for e in golden])
    )
    labels = np.array([e.label for e in golden])
    assert p[labels == 1, 1].mean() > p[labels == 0, 1].mean()
