"""The objective policy on every held-out set, against the fixed tiers' hull.

Held out (never fitted, thresholded or chosen on): the golden sample's held-out half
(MMLU, GSM8K; Mixtral-8x7B / GPT-4-1106), and whole benchmarks of the pool — MBPP and
OpenBookQA with LLMRouter's models (Llama-3.1-8B / Nemotron-51B), MBPP and Winogrande
with RouterBench's three (Mistral-7B / Mixtral-8x7B / GPT-4-1106, with their measured
cost), and those two pooled: the three-tier set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from routers.objective import Objective
from routers.training.datasets import Example, Splits
from routers.training.evaluation import Calibration, calibration
from routers.training.tier_sets import PolicyResult, TierSet, run_policy, tier_set

F64 = npt.NDArray[np.float64]
Predict = Callable[[TierSet], F64]  # (rows, tiers) P(acceptable) for the set's tiers
Reference = Callable[[TierSet], tuple[F64, F64] | None]  # the reference traffic for its tiers
THREE_TIER = "three tiers: RouterBench mbpp + winogrande"


def held_out_sets(splits: Splits) -> list[TierSet]:
    groups: dict[str, list[Example]] = {}
    for example in splits.golden_test:
        groups.setdefault(f"golden/{example.benchmark}", []).append(example)
    for example in splits.pool_test:
        if example.scores:
            origin = example.source.split("/")[0].lower()
            groups.setdefault(f"pool/{example.benchmark}@{origin}", []).append(example)
    sets = [tier_set(name, rows) for name, rows in sorted(groups.items())]
    three = [e for s in sets if len(s.models) == 3 for e in s.examples]
    if three:
        sets.append(tier_set(THREE_TIER, three))
    return sets


@dataclass(frozen=True, slots=True)
class SetRow:
    rows: TierSet
    shipped: PolicyResult
    at_quarter: PolicyResult  # {cost: 0.25}, the RouteLLM-style operating point


def evaluate_sets(
    sets: Sequence[TierSet],
    predict: Predict,
    objective: Objective,
    min_samples: int,
    reference: Reference | None = None,
) -> list[SetRow]:
    out = []
    for rows in sets:
        quality = predict(rows)
        prior = None if reference is None else reference(rows)
        quarter = Objective("cost", 0.25, objective.segment, objective.dominance)
        out.append(
            SetRow(
                rows,
                run_policy(quality, rows, objective, min_samples, prior),
                run_policy(quality, rows, quarter, min_samples, prior),
            )
        )
    return out


def _cell(r: PolicyResult) -> str:
    return f"{r.point.accuracy:.3f} {r.point.cost:6.1%} {r.hull:.3f} {r.margin:+.3f}"


def format_sets(rows: Sequence[SetRow], objective: Objective) -> str:
    shipped = f"{objective.kind} {objective.share:g} (shipped)"
    head = (
        f"{'held-out set':<44} {'n':>5} | {shipped:^27} | {'cost 0.25':^27} | fixed tiers "
        "(accuracy @ cost)"
    )
    columns = f"{'acc   cost   hull  margin':^27}"
    sub = f"{'':<44} {'':>5} | {columns} | {columns} |"
    lines = [head, sub, "-" * len(head)]
    for r in rows:
        fixed = "  ".join(f"{p.accuracy:.3f}@{p.cost:.1%}" for p in r.rows.fixed)
        lines.append(
            f"{r.rows.name:<44} {len(r.rows.examples):>5} | {_cell(r.shipped):^27} | "
            f"{_cell(r.at_quarter):^27} | {fixed}"
        )
    margins = [r.shipped.margin for r in rows]
    if margins:
        lines.append(f"smallest margin of the shipped policy: {min(margins):+.3f}")
    return "\n".join(lines)


def tier_calibration(sets: Sequence[TierSet], predict: Predict) -> list[tuple[str, Calibration]]:
    """Reliability per rung (cheapest, middle, largest) over every held-out row."""
    rungs: dict[str, tuple[list[F64], list[F64]]] = {}
    for rows in sets:
        if rows.name == THREE_TIER:
            continue  # its rows are already in the two sets it pools
        quality = predict(rows)
        k = quality.shape[1]
        for t in range(k):
            name = "cheapest" if t == 0 else "largest" if t == k - 1 else "middle"
            preds, seen = rungs.setdefault(name, ([], []))
            preds.append(quality[:, t])
            seen.append(rows.correct[:, t])
    return [
        (name, calibration(np.concatenate(p), np.concatenate(s)))
        for name, (p, s) in sorted(rungs.items())
    ]
