"""Precision and recall of the semantic cache on labelled prompt pairs.

A pair is ``{"id", "a", "b", "match", "kind", "split"}``: ``match`` says whether ``b`` may
be answered with ``a``'s answer. Two files: ``data/cache_pairs.jsonl`` (319 pairs written
by hand, all ``tune``) and ``data/cache_pairs_generated.jsonl`` (templates + lexicons,
``tune`` or ``heldout`` by kind and template: routers/training/corpora/cache_pairs.py). A pair is
predicted to match when the guard is equal (the semantic prefix), the cosine similarity
reaches the threshold and the verifier accepts it — the decision the cache makes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from routers.embedding import Embedder
from routers.verifier.alignment import Verification, verified
from routers.verifier.guard import guard

DATA = Path(__file__).resolve().parents[2] / "data"
PAIRS = DATA / "cache_pairs.jsonl"
GENERATED = DATA / "cache_pairs_generated.jsonl"
Mode = Literal["strict", "guard", "cosine"]


@dataclass(frozen=True, slots=True)
class ScoredPair:
    id: str
    kind: str
    split: str
    match: bool
    similarity: float
    same_prefix: bool  # the guard is part of the semantic prefix
    strict: bool  # verified("strict", a, b)
    guard_ok: bool  # verified("guard", a, b)

    def passes(self, mode: Mode) -> bool:
        if mode == "cosine":
            return True
        return self.same_prefix and (self.strict if mode == "strict" else self.guard_ok)


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


def load_pairs(split: str | None = None, *, hand: bool = True) -> list[dict[str, object]]:
    """The labelled pairs of one split (None: all); ``hand``: include the hand-written file."""
    pairs = [
        {"split": "tune", "source": "hand", **orjson.loads(line)}
        for line in (PAIRS.read_bytes().splitlines() if hand else [])
        if line.strip()
    ]
    pairs += [orjson.loads(line) for line in GENERATED.read_bytes().splitlines() if line.strip()]
    return [p for p in pairs if split is None or p["split"] == split]


async def score_pairs(embedder: Embedder, pairs: Sequence[dict[str, object]]) -> list[ScoredPair]:
    a = await embedder.embed([str(p["a"]) for p in pairs])
    b = await embedder.embed([str(p["b"]) for p in pairs])
    similarity = np.sum(a * b, axis=1)
    return [
        ScoredPair(
            id=str(p["id"]),
            kind=str(p["kind"]),
            split=str(p.get("split", "tune")),
            match=bool(p["match"]),
            similarity=float(s),
            same_prefix=guard(str(p["a"])) == guard(str(p["b"])),
            strict=verified("strict", str(p["a"]), str(p["b"])),
            guard_ok=verified("guard", str(p["a"]), str(p["b"])),
        )
        for p, s in zip(pairs, similarity, strict=True)
    ]


def evaluate(scored: Sequence[ScoredPair], threshold: float, mode: Mode = "strict") -> Scores:
    true_hits = false_hits = 0
    false_by_kind: dict[str, int] = {}
    for pair in scored:
        hit = pair.similarity >= threshold and pair.passes(mode)
        if hit and pair.match:
            true_hits += 1
        elif hit:
            false_hits += 1
            false_by_kind[pair.kind] = false_by_kind.get(pair.kind, 0) + 1
    positives = sum(1 for p in scored if p.match)
    return Scores(
        threshold, true_hits, false_hits, positives, len(scored) - positives, false_by_kind
    )


def by_kind(
    scored: Sequence[ScoredPair], threshold: float, mode: Mode = "strict"
) -> dict[str, Scores]:
    kinds = sorted({p.kind for p in scored})
    return {k: evaluate([p for p in scored if p.kind == k], threshold, mode) for k in kinds}


def zero_false_hit_threshold(scored: Sequence[ScoredPair], mode: Mode = "strict") -> float:
    """The lowest threshold (on a 0.01 grid) at which no negative pair matches."""
    worst = max((p.similarity for p in scored if not p.match and p.passes(mode)), default=0.0)
    return math.floor(worst * 100 + 1) / 100


__all__ = ["Verification", "by_kind", "evaluate", "load_pairs", "score_pairs"]
