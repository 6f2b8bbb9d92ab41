"""Precision and recall of the semantic cache on labelled prompt pairs.

A pair is ``{"id", "a", "b", "match", "kind"}``: ``match`` says whether ``b`` may be
answered with ``a``'s answer. A pair is predicted to match when the guard allows it
(``semantic_guard.comparable``) and the cosine similarity reaches the threshold —
the same decision the cache makes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from routers.embedding import Embedder
from routers.semantic_guard import comparable

PAIRS = Path(__file__).resolve().parent.parent / "data" / "cache_pairs.jsonl"


@dataclass(frozen=True, slots=True)
class ScoredPair:
    id: str
    kind: str
    match: bool
    similarity: float
    comparable: bool


@dataclass(frozen=True, slots=True)
class Scores:
    threshold: float
    true_hits: int
    false_hits: int
    positives: int
    negatives: int
    false_by_kind: dict[str, int]

    @property
    def precision(self) -> float:
        hits = self.true_hits + self.false_hits
        return self.true_hits / hits if hits else 1.0

    @property
    def recall(self) -> float:
        return self.true_hits / self.positives if self.positives else 0.0


def load_pairs(path: Path = PAIRS) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def score_pairs(embedder: Embedder, pairs: Sequence[dict[str, object]]) -> list[ScoredPair]:
    a = await embedder.embed([str(p["a"]) for p in pairs])
    b = await embedder.embed([str(p["b"]) for p in pairs])
    similarity = np.sum(a * b, axis=1)
    return [
        ScoredPair(
            id=str(p["id"]),
            kind=str(p["kind"]),
            match=bool(p["match"]),
            similarity=float(s),
            comparable=comparable(str(p["a"]), str(p["b"])),
        )
        for p, s in zip(pairs, similarity, strict=True)
    ]


def evaluate(scored: Sequence[ScoredPair], threshold: float, *, use_guard: bool = True) -> Scores:
    true_hits = false_hits = 0
    false_by_kind: dict[str, int] = {}
    for pair in scored:
        hit = pair.similarity >= threshold and (pair.comparable or not use_guard)
        if hit and pair.match:
            true_hits += 1
        elif hit:
            false_hits += 1
            false_by_kind[pair.kind] = false_by_kind.get(pair.kind, 0) + 1
    positives = sum(1 for p in scored if p.match)
    return Scores(
        threshold, true_hits, false_hits, positives, len(scored) - positives, false_by_kind
    )


def zero_false_hit_threshold(scored: Sequence[ScoredPair], *, use_guard: bool = True) -> float:
    """The lowest threshold (on a 0.01 grid) at which no negative pair matches."""
    worst = max(
        (p.similarity for p in scored if not p.match and (p.comparable or not use_guard)),
        default=0.0,
    )
    return math.floor(worst * 100 + 1) / 100
