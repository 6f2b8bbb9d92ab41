"""Batch work for the CLI: embed many texts, score them, train, and the evaluation table."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from routers.classifier import ComplexityClassifier, ComplexityScore
from routers.datasets import Example, Splits
from routers.embedding import SyncEmbedder, last_user_text
from routers.evaluation import RouterReport, random_report, report
from routers.features import message_text

Array = npt.NDArray[np.float32]
CHUNK = 256


def embed_texts(
    embedder: SyncEmbedder, texts: Sequence[str], progress: Callable[[int], None] | None = None
) -> Array:
    parts = [np.zeros((0, embedder.dim), dtype=np.float32)]
    for start in range(0, len(texts), CHUNK):
        parts.append(embedder.embed_sync(texts[start : start + CHUNK]))
        if progress is not None:
            progress(min(start + CHUNK, len(texts)))
    return np.concatenate(parts)


def score_conversations(
    classifier: ComplexityClassifier,
    embedder: SyncEmbedder,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
) -> list[ComplexityScore]:
    texts = [last_user_text(c) for c in conversations]
    return classifier.classify_many(conversations, texts, embed_texts(embedder, texts))


@dataclass(frozen=True, slots=True)
class BenchmarkRow:
    name: str
    size: int
    gap: float  # strong - weak mean correctness
    classifier: RouterReport
    length: RouterReport
    random: RouterReport


def evaluation_sets(splits: Splits) -> dict[str, list[Example]]:
    sets: dict[str, list[Example]] = {}
    for example in splits.golden_test:
        sets.setdefault(f"golden/{example.benchmark}", []).append(example)
    for example in splits.pool_test:
        if example.weak is not None and example.strong is not None:
            origin = example.source.split("/")[0].lower()
            sets.setdefault(f"pool/{example.benchmark}@{origin}", []).append(example)
    return dict(sorted(sets.items()))


def prompt_length(example: Example) -> float:
    return float(sum(len(message_text(m)) for m in example.messages))


def evaluate(
    sets: Mapping[str, Sequence[Example]], scores: Mapping[str, Sequence[float]], seed: int = 0
) -> list[BenchmarkRow]:
    rows = []
    for name, examples in sets.items():
        weak = np.array([e.weak for e in examples], dtype=np.float64)
        strong = np.array([e.strong for e in examples], dtype=np.float64)
        lengths = np.array([prompt_length(e) for e in examples])
        rows.append(
            BenchmarkRow(
                name,
                len(examples),
                float(strong.mean() - weak.mean()),
                report(np.asarray(scores[name], dtype=np.float64), weak, strong, seed),
                report(lengths, weak, strong, seed),
                random_report(weak, strong, seed),
            )
        )
    return rows


def format_table(rows: Sequence[BenchmarkRow]) -> str:
    head = (
        f"{'benchmark':<28} {'n':>5} {'gap':>6} | {'APGR':>6} {'CPT50':>6} {'CPT80':>6} | "
        f"{'length':>6} {'CPT50':>6} {'CPT80':>6} | {'random':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        c, n = r.classifier, r.length
        lines.append(
            f"{r.name:<28} {r.size:>5} {r.gap:>6.3f} | {c.apgr:>6.3f} {c.cpt50:>6.2f} "
            f"{c.cpt80:>6.2f} | {n.apgr:>6.3f} {n.cpt50:>6.2f} {n.cpt80:>6.2f} | "
            f"{r.random.apgr:>6.3f}"
        )
    if rows:
        mean = np.mean([r.classifier.apgr for r in rows])
        mean_len = np.mean([r.length.apgr for r in rows])
        lines.append(f"{'mean':<28} {'':>5} {'':>6} | {mean:>6.3f} {'':>13} | {mean_len:>6.3f}")
    return "\n".join(lines)
