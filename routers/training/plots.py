"""``tiergate eval-classifier --plot DIR``: one cost-accuracy chart per held-out set.

Each chart: the objective policy swept over its operating points (``cost`` shares and
``quality`` shares), the shipped objective marked, the length router (longest prompts
to the largest tier), random mixes of neighbouring fixed tiers, the fixed tiers and
their hull. matplotlib (a dev dependency) is imported here only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from routers.objective import Objective
from routers.training.frontier import Point, by_length, hull_curve
from routers.training.heldout import SetRow
from routers.training.tier_sets import PolicyResult, TierSet, run_policy

COST_SHARES = (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0)
QUALITY_SHARES = (0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 1.0)


def sweep(
    quality: np.ndarray,
    rows: TierSet,
    min_samples: int,
    reference: Any = None,
    segment: bool = True,
) -> list[PolicyResult]:
    objectives = [Objective("cost", s, segment) for s in COST_SHARES]
    objectives += [Objective("quality", s, segment) for s in QUALITY_SHARES]
    results = [run_policy(quality, rows, o, min_samples, reference) for o in objectives]
    return sorted(results, key=lambda r: r.point.cost)


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") + ".png"


def draw(row: SetRow, curve: Sequence[PolicyResult], folder: Path, objective: Objective) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = row.rows
    fixed = sorted(rows.fixed, key=lambda p: p.cost)
    grid = np.linspace(min(p.cost for p in fixed), 1.0, 400)
    length = by_length(rows.lengths, rows.correct, rows.cost, np.linspace(0, 1, 41))
    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=110)
    ax.plot(grid * 100, hull_curve(fixed, grid), color="0.3", lw=2.5, label="fixed-tier hull")
    chain = np.interp(grid, [p.cost for p in fixed], [p.accuracy for p in fixed])
    ax.plot(grid * 100, chain, ls=":", color="tab:gray", label="random mix of neighbouring tiers")
    _line(ax, length, "tab:orange", "prompt length (longest to the largest tier)", "--")
    ax.plot(
        [r.point.cost * 100 for r in curve],
        [r.point.accuracy for r in curve],
        color="tab:blue",
        lw=2,
        marker="o",
        ms=3.5,
        label="tiergate objective (swept)",
    )
    for point, name in zip(rows.fixed, rows.models, strict=True):
        ax.scatter(point.cost * 100, point.accuracy, color="black", zorder=5)
        ax.annotate(
            f"always {name}",
            (point.cost * 100, point.accuracy),
            fontsize=7,
            xytext=(4, -10),
            textcoords="offset points",
        )
    shipped = row.shipped.point
    ax.scatter(
        shipped.cost * 100,
        shipped.accuracy,
        marker="*",
        s=220,
        color="tab:red",
        zorder=6,
        label=f"shipped ({objective.kind} {objective.share:g}): margin {row.shipped.margin:+.3f}",
    )
    ax.set_xscale("log")
    ax.set_xlabel("cost, % of always the largest tier (log scale; mixes are straight in cost)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"{rows.name} (n={len(rows.examples)})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right")
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / _file_name(rows.name)
    fig.savefig(path)
    plt.close(fig)
    return path


def _line(ax: object, points: Sequence[Point], color: str, label: str, style: str) -> None:
    ordered = sorted(points, key=lambda p: p.cost)
    ax.plot(  # type: ignore[attr-defined]
        [p.cost * 100 for p in ordered],
        [p.accuracy for p in ordered],
        color=color,
        ls=style,
        label=label,
    )
