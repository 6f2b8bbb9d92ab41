"""Batch work for the CLI: embed many texts, score them, train, and the evaluation table."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from routers.classifier import ComplexityClassifier, ComplexityScore
from routers.embedding import SyncEmbedder, last_user_text
from routers.features import message_text
from routers.training.datasets import Example, Splits
from routers.training.evaluation import (
    Calibration,
    RouterReport,
    TierMix,
    apgr_difference_ci,
    best_three_tier,
    calibration,
    random_report,
    random_three_tier,
    report,
    three_tier_difference_ci,
    tier_mix,
)

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


def _text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def embedding_cache_path(embedder_name: str, folder: Path | None = None) -> Path:
    root = folder or Path(
        os.environ.get("TIERGATE_CACHE_DIR") or Path.home() / ".cache" / "tiergate"
    )
    return root / "embeddings" / (embedder_name.replace("/", "_") + ".npz")


def cached_embed(
    embedder: SyncEmbedder,
    texts: Sequence[str],
    path: Path,
    progress: Callable[[int], None] | None = None,
) -> Array:
    """``embed_texts`` with a disk cache keyed by the text's hash (one file per embedder).

    Only texts the cache lacks are embedded; the file is rewritten atomically."""
    keys = [_text_key(t) for t in texts]
    known: dict[bytes, int] = {}
    stored = np.zeros((0, embedder.dim), dtype=np.float32)
    stored_keys = np.zeros((0,), dtype="S16")
    if path.exists():
        with np.load(path, allow_pickle=False) as data:
            stored_keys, stored = data["keys"], data["vectors"]
        # ``bytes(k)`` of an "S16" item would drop trailing NUL bytes: read raw rows.
        raw = np.frombuffer(stored_keys.astype("S16").tobytes(), np.uint8).reshape(-1, 16)
        known = {row.tobytes(): i for i, row in enumerate(raw)}
    missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in known}.items())
    if missing:
        fresh = embed_texts(embedder, [t for _, t in missing], progress)
        stored = np.concatenate([stored, fresh])
        stored_keys = np.concatenate([stored_keys, np.array([k for k, _ in missing], "S16")])
        known.update({k: len(known) + i for i, (k, _) in enumerate(missing)})
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        with partial.open("wb") as handle:
            np.savez(handle, keys=stored_keys, vectors=stored)
        os.replace(partial, path)
    return np.asarray(stored[[known[k] for k in keys]], dtype=np.float32)


def score_conversations(
    classifier: ComplexityClassifier,
    embedder: SyncEmbedder,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    cache: Path | None = None,
) -> list[ComplexityScore]:
    """Scores of many conversations; ``cache``: an ``embedding_cache_path`` to reuse."""
    texts = [last_user_text(c) for c in conversations]
    vectors = (
        embed_texts(embedder, texts) if cache is None else cached_embed(embedder, texts, cache)
    )
    return classifier.classify_many(conversations, texts, vectors)


@dataclass(frozen=True, slots=True)
class BenchmarkRow:
    name: str
    size: int
    gap: float  # strong - weak mean correctness
    classifier: RouterReport
    length: RouterReport
    random: RouterReport
    ece: float  # of the score as P(the cheapest tier's model failed)
    ci: tuple[float, float]  # paired bootstrap 95 % interval of APGR(tiergate) - APGR(length)


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


_NO_CI = (float("nan"), float("nan"))


def evaluate(
    sets: Mapping[str, Sequence[Example]],
    scores: Mapping[str, Sequence[float]],
    seed: int = 0,
    bootstrap: bool = True,
) -> list[BenchmarkRow]:
    rows = []
    for name, examples in sets.items():
        weak = np.array([e.weak for e in examples], dtype=np.float64)
        strong = np.array([e.strong for e in examples], dtype=np.float64)
        lengths = np.array([prompt_length(e) for e in examples])
        ours = np.asarray(scores[name], dtype=np.float64)
        rows.append(
            BenchmarkRow(
                name,
                len(examples),
                float(strong.mean() - weak.mean()),
                report(ours, weak, strong, seed),
                report(lengths, weak, strong, seed),
                random_report(weak, strong, seed),
                calibration(ours, 1.0 - weak).ece,
                apgr_difference_ci(ours, lengths, weak, strong, seed=seed) if bootstrap else _NO_CI,
            )
        )
    return rows


def format_table(rows: Sequence[BenchmarkRow]) -> str:
    head = (
        f"{'benchmark':<28} {'n':>5} {'gap':>6} | {'APGR':>6} {'CPT50':>6} {'CPT80':>6} | "
        f"{'length':>6} {'CPT50':>6} {'CPT80':>6} | {'random':>6} | {'ECE':>5} | "
        f"{'vs length [95% CI]':>23}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        c, n = r.classifier, r.length
        lines.append(
            f"{r.name:<28} {r.size:>5} {r.gap:>6.3f} | {c.apgr:>6.3f} {c.cpt50:>6.2f} "
            f"{c.cpt80:>6.2f} | {n.apgr:>6.3f} {n.cpt50:>6.2f} {n.cpt80:>6.2f} | "
            f"{r.random.apgr:>6.3f} | {r.ece:>5.3f} | {c.apgr - n.apgr:>+7.3f} "
            f"[{r.ci[0]:+.3f}, {r.ci[1]:+.3f}]"
        )
    if rows:
        mean = np.mean([r.classifier.apgr for r in rows])
        mean_len = np.mean([r.length.apgr for r in rows])
        lines.append(f"{'mean':<28} {'':>5} {'':>6} | {mean:>6.3f} {'':>13} | {mean_len:>6.3f}")
    return "\n".join(lines)


THREE_TIER_BUDGET = 0.25


@dataclass(frozen=True, slots=True)
class ThreeTierRow:
    name: str
    size: int
    classifier: TierMix  # best accuracy within the budget, thresholds swept
    length: TierMix
    random: TierMix
    at_thresholds: TierMix  # the classifier's score with the configured thresholds
    always: tuple[TierMix, ...]  # everything to one tier, cheapest first
    ci: tuple[float, float]  # paired bootstrap 95 % interval of the accuracy vs length
    at_shares: TierMix | None = None  # thresholds at the quantiles ``target_share`` asks for
    shares: tuple[float, ...] = ()


def three_tier_set(splits: Splits) -> list[Example]:
    """Held-out rows scored on three tiers (with per-tier cost): RouterBench's models."""
    return [e for e in splits.pool_test if e.tiers is not None and e.costs is not None]


def evaluate_three_tier(
    name: str,
    examples: Sequence[Example],
    scores: Sequence[float],
    thresholds: tuple[float, float],
    seed: int = 0,
    bootstrap: bool = True,
    shares: Sequence[float] = (),
) -> ThreeTierRow:
    correct = np.array([e.tiers for e in examples], dtype=np.float64)
    cost = np.array([e.costs for e in examples], dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    lengths = np.array([prompt_length(e) for e in examples])
    tiers = np.where(s < thresholds[0], 0, np.where(s >= thresholds[1], 2, 1)).astype(np.intp)
    return ThreeTierRow(
        name,
        len(examples),
        best_three_tier(s, correct, cost, THREE_TIER_BUDGET, seed),
        best_three_tier(lengths, correct, cost, THREE_TIER_BUDGET, seed),
        random_three_tier(correct, cost, THREE_TIER_BUDGET, seed),
        tier_mix(tiers, correct, cost),
        tuple(tier_mix(np.full(len(s), t, np.intp), correct, cost) for t in range(3)),
        three_tier_difference_ci(s, lengths, correct, cost, THREE_TIER_BUDGET, seed=seed)
        if bootstrap
        else _NO_CI,
        _at_shares(s, shares, correct, cost) if len(shares) == 3 else None,
        tuple(shares),
    )


def _at_shares(
    scores: npt.NDArray[np.float64], shares: Sequence[float], correct: Any, cost: Any
) -> TierMix:
    """The split a ``target_share`` policy settles on: thresholds at the score quantiles."""
    low = np.quantile(scores, shares[0])
    high = np.quantile(scores, shares[0] + shares[1])
    tiers = np.where(scores < low, 0, np.where(scores >= high, 2, 1)).astype(np.intp)
    return tier_mix(tiers, correct, cost)


def _mix(m: TierMix) -> str:
    shares = "/".join(f"{x:.2f}" for x in m.shares)
    return (
        f"accuracy {m.accuracy:.3f} at {m.cost_share:6.1%} of always-large cost (shares {shares})"
    )


def format_three_tier(row: ThreeTierRow, thresholds: tuple[float, float]) -> str:
    budget = f"best accuracy at <= {THREE_TIER_BUDGET:.0%} of always-large cost"
    return "\n".join(
        [
            f"three tiers: {row.name} (n={row.size}), {budget}",
            f"  tiergate                   {_mix(row.classifier)}",
            f"  length                     {_mix(row.length)}",
            f"  random                     {_mix(row.random)}",
            f"  tiergate - length          {row.classifier.accuracy - row.length.accuracy:+.3f} "
            f"(paired bootstrap 95% CI [{row.ci[0]:+.3f}, {row.ci[1]:+.3f}])",
            f"  tiergate at {thresholds[0]:g} / {thresholds[1]:g}        {_mix(row.at_thresholds)}",
            *(
                [f"  tiergate at target_share {_shares(row.shares)}  {_mix(row.at_shares)}"]
                if row.at_shares is not None
                else []
            ),
            *(f"  always {t:<19} {_mix(m)}" for t, m in zip(TIER_NAMES, row.always, strict=True)),
        ]
    )


TIER_NAMES = ("small", "medium", "large")


def _shares(shares: Sequence[float]) -> str:
    return "/".join(f"{x:g}" for x in shares)


def format_calibration(title: str, cal: Calibration) -> str:
    """A text reliability diagram: per score bin, the mean score against the observed rate."""
    lines = [
        f"calibration: {title}: ECE {cal.ece:.3f}",
        "  score bin      n   mean score  observed",
    ]
    for lo, hi, n, mean, seen in cal.bins:
        bar = "#" * round(seen * 40)
        lines.append(f"  {lo:.1f}-{hi:.1f}  {n:>6}      {mean:.3f}     {seen:.3f}  {bar}")
    return "\n".join(lines)
