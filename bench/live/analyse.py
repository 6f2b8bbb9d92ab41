"""Cost and accuracy of routing policies on the live records (``bench/live/records``).

On the prompts every tier has answered (records are made in one shuffled order, so the
common part is a sample of every kind): always-small, always-medium, always-large, the
cheapest correct tier (an oracle, for scale) and prompt-only ``auto`` as shipped: the tier
``tiergate classify`` picks under ``config/gateway.yaml``'s objective, its answer looked up in
the records. Cost is what the gateway charged (``x-tiergate-cost-usd``, the config's prices)
and the engine CPU-seconds measured while the answer was made.

Usage: ``python -m bench.live.analyse --set heldout`` (after ``bench.live.grade``) writes
``bench/live/results/<set>.md``, ``.json`` and the cost-accuracy plot ``.png`` (``--dir D``:
``D/records/`` and ``D/grades/`` in, ``D/results/`` out; ``--setup``: how the records were made).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.live.escalate import (
    Answered,
    candidate_thresholds,
    decisions,
    replay,
    single,
    spec_of,
    totals,
)
from bench.live.sets import load
from routers.decision import TierDecision
from routers.escalation import relative_costs

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SETUP = (
    "2 cores shared with other work, one llama.cpp thread per engine "
    "(bench/live/gateway-1thread.yaml)"
)
TIERS = ("small", "medium", "large")
KINDS = ("fact", "chat", "task", "math", "code")


def records(folder: Path, name: str) -> dict[str, dict[str, dict[str, Any]]]:
    """``folder``'s records of the set: {id: {tier: row}}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for tier in TIERS:
        path = folder / f"{name}-{tier}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if line:
                row = json.loads(line)
                out.setdefault(row["id"], {})[tier] = row
    return out


def auto_rows(items: list[dict[str, Any]], config: Path) -> dict[str, dict[str, Any]]:
    """``tiergate classify``'s row per prompt under the config's policy (its tier, per-tier
    qualities, λ and the tiers it chose among). 200 rows or more (``target.min_samples``)
    are routed at their own pooled λ, as a deployment's steady traffic is; fewer at the
    quality model's reference λ, as a gateway that has just started routes them."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
        source.write_text(
            "".join(json.dumps({"id": i["id"], "prompt": i["prompt"]}) + "\n" for i in items)
        )
        command = [sys.executable, "-m", "gateway", "classify", str(source), "-o", str(target)]
        subprocess.run([*command, "--config", str(config)], cwd=REPO, check=True)
        rows = [json.loads(line) for line in target.read_text().splitlines() if line]
    return {row["id"]: row for row in rows}


def policy(name: str, answers: list[Answered], kinds: list[str]) -> dict[str, Any]:
    """A policy's accuracy, cost (priced and engine CPU-s), tier shares and escalations."""
    accuracy, usd = totals(answers)
    per_kind = {}
    for kind in KINDS:
        marks = [a.correct for a, k in zip(answers, kinds, strict=True) if k == kind]
        if marks:
            per_kind[kind] = {"n": len(marks), "accuracy": round(sum(marks) / len(marks), 3)}
    row: dict[str, Any] = {
        "policy": name,
        "accuracy": round(accuracy, 4),
        "usd": usd,
        "cpu_s": round(sum(a.cpu_s for a in answers), 1),
        "tier_share": {
            t: round(sum(a.tier == t for a in answers) / len(answers), 3) for t in TIERS
        },
        "per_kind": per_kind,
    }
    tried = [a for a in answers if a.escalated is not None]
    if tried:
        row["escalation"] = {
            "cheap_first": round(len(tried) / len(answers), 3),
            "escalated": round(sum(bool(a.escalated) for a in tried) / len(answers), 3),
            "kept": sum(a.escalated is False for a in tried),
        }
    return row


def prompt_only(ids: list[str], plans: dict[str, TierDecision], lam: float) -> dict[str, str]:
    """Prompt-only ``auto`` at a fixed λ over every tier: best quality - λ · cost share."""
    out = {}
    for i in ids:
        choice = plans[i].choice
        assert choice is not None
        share = relative_costs(choice.cost)
        value = [q - lam * s for q, s in zip(choice.quality, share, strict=True)]
        out[i] = TIERS[max(range(len(TIERS)), key=lambda t: (value[t], -t))]
    return out


def hull_accuracy(fixed: list[dict[str, Any]], usd: float) -> float:
    """The fixed tiers' convex hull at this cost: the best mix of two fixed tiers (or one)."""
    points = sorted((row["usd"], row["accuracy"]) for row in fixed)
    best = max((a for c, a in points if c <= usd), default=0.0)
    for (c1, a1), (c2, a2) in ((p, q) for p in points for q in points if p[0] < q[0]):
        if c1 <= usd <= c2:
            best = max(best, a1 + (a2 - a1) * (usd - c1) / (c2 - c1))
    return best


def plot(
    rows: list[dict[str, Any]],
    curves: dict[str, list[tuple[float, float, float]]],
    path: Path,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for at, (axis, label) in enumerate(((axes[0], "priced USD"), (axes[1], "engine CPU-s"))):
        key = ("usd", "cpu_s")[at]
        for name, points in curves.items():
            axis.plot(
                [p[1 + at] for p in points],
                [p[0] for p in points],
                ".-",
                lw=0.8,
                ms=3,
                alpha=0.6,
                label=name,
            )
        for row in rows:
            axis.scatter(row[key], row["accuracy"], zorder=3)
            axis.annotate(row["policy"], (row[key], row["accuracy"]), fontsize=7)
        axis.set_xlabel(label)
        axis.set_ylabel("accuracy")
    axes[0].legend(fontsize=7, loc="lower right")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", default="heldout", choices=["heldout", "fit"])
    parser.add_argument("--config", type=Path, default=REPO / "config" / "gateway.yaml")
    parser.add_argument("--dir", type=Path, default=HERE, help="records/, grades/, results/")
    parser.add_argument("--setup", default=SETUP, help="how the records were made")
    args = parser.parse_args()
    items = {item["id"]: item for item in load(args.set)}
    recs = records(args.dir / "records", args.set)
    grades = json.loads((args.dir / "grades" / f"{args.set}.json").read_text())
    results = args.dir / "results"
    ids = [i for i in items if set(TIERS) <= set(recs.get(i, {})) & set(grades.get(i, {}))]
    if not ids:
        raise SystemExit("no prompt has records of all three tiers yet")
    kinds = [items[i]["kind"] for i in ids]
    routed = auto_rows(list(items.values()), args.config)  # every prompt, recorded or not
    plans = decisions(routed, {i: items[i]["prompt"] for i in items}, args.config)
    spec = spec_of(args.config)

    def fixed(choice: dict[str, str]) -> list[Answered]:
        return [single(choice[i], recs[i][choice[i]], grades[i][choice[i]]) for i in ids]

    always = [policy(f"always-{t}", fixed(dict.fromkeys(ids, t)), kinds) for t in TIERS]
    oracle = {i: next((t for t in TIERS if grades[i][t]), "small") for i in ids}
    shipped = replay(ids, plans, spec, recs, grades)
    rows = [
        *always,
        policy("auto (prompt-only)", fixed({i: plans[i].tier for i in ids}), kinds),
        policy("auto + escalation (shipped)", shipped, kinds),
        policy("oracle (cheapest correct)", fixed(oracle), kinds),
    ]

    def point(answers: list[Answered]) -> tuple[float, float, float]:
        """(accuracy, priced USD, engine CPU-s): a point of a curve."""
        return (*totals(answers), sum(a.cpu_s for a in answers))

    lams = [0.0, *(round(0.02 * 1.25**k, 4) for k in range(30))]
    thresholds = candidate_thresholds(ids, plans, spec, recs)[::3]
    curves = {
        "prompt-only auto, every λ": [point(fixed(prompt_only(ids, plans, lam))) for lam in lams],
        f"auto + escalation, margin {spec.margin:g}, every threshold": [
            point(replay(ids, plans, spec.model_copy(update={"threshold": t}), recs, grades))
            for t in thresholds
        ],
    }
    accuracy, usd = totals(shipped)
    large = always[-1]
    at_cost = max((a for a, c, _ in curves["prompt-only auto, every λ"] if c <= usd), default=0.0)
    verdict = {
        "escalation_accuracy": round(accuracy, 4),
        "large_accuracy": large["accuracy"],
        "cost_share_of_large": round(usd / large["usd"], 3),
        "prompt_only_at_equal_cost": round(at_cost, 4),
        "hull_at_equal_cost": round(hull_accuracy(always, usd), 4),
    }
    # Prompt-only auto against the fixed-tier hull along its λ curve, and as shipped.
    over = [(a - hull_accuracy(always, c), a, c) for a, c, _ in curves["prompt-only auto, every λ"]]
    best = max(over)
    shipped_auto = next(r for r in rows if r["policy"] == "auto (prompt-only)")
    verdict["prompt_only_over_hull_best"] = [round(best[0], 4), round(best[1], 4), best[2]]
    verdict["prompt_only_over_hull_shipped"] = round(
        shipped_auto["accuracy"] - hull_accuracy(always, shipped_auto["usd"]), 4
    )
    cpus = sorted({r.get("cpu", "unknown CPU") for by in recs.values() for r in by.values()})
    mix = {k: kinds.count(k) for k in KINDS}
    results.mkdir(exist_ok=True)
    summary = {
        "set": args.set,
        "prompts": len(ids),
        "of": len(items),
        "mix": mix,
        "cpu": cpus,
        "escalation": spec.model_dump(),
        "verdict": verdict,
    }
    (results / f"{args.set}.json").write_text(
        json.dumps({**summary, "policies": rows, "curves": curves}, indent=1) + "\n"
    )
    title = f"{args.set}: {len(ids)} prompts answered by all three tiers ({'; '.join(cpus)})"
    plot(rows, curves, results / f"{args.set}.png", title)
    signal = f"q{spec.quantile:g}" if spec.signal == "quantile" else spec.signal
    lines = [
        f"# Live bench, {args.set} set",
        "",
        f"{len(ids)} of {len(items)} prompts have records of all three tiers "
        f"(mix: {', '.join(f'{k} {n}' for k, n in mix.items())}); recorded on "
        f"{'; '.join(cpus)}, {args.setup}. Escalation as shipped (the demo tenant's): "
        f"margin {spec.margin:g}, the {signal} of the cheap answer's token "
        f"log-probabilities ≥ {spec.threshold:g} keeps it.",
        "",
        "| policy | accuracy | priced USD | engine CPU-s | small / medium / large | "
        + " | ".join(KINDS)
        + " | cheap first / escalated |",
        "|---|---|---|---|---|" + "---|" * len(KINDS) + "---|",
    ]
    for row in rows:
        share = " / ".join(f"{row['tier_share'][t]:.2f}" for t in TIERS)
        per_kind = " | ".join(
            f"{row['per_kind'][k]['accuracy']:.2f}" if k in row["per_kind"] else "-" for k in KINDS
        )
        tried = row.get("escalation")
        escalation = f"{tried['cheap_first']:.2f} / {tried['escalated']:.2f}" if tried else "-"
        lines.append(
            f"| {row['policy']} | {row['accuracy']:.3f} | {row['usd']:.5f} | "
            f"{row['cpu_s']:.0f} | {share} | {per_kind} | {escalation} |"
        )
    lines += [
        "",
        f"Escalation as shipped: accuracy {verdict['escalation_accuracy']:.3f} against "
        f"always-large's {verdict['large_accuracy']:.3f}, at {verdict['cost_share_of_large']:.0%} "
        f"of its priced cost; at that cost prompt-only `auto` (best λ) reaches "
        f"{verdict['prompt_only_at_equal_cost']:.3f} and the fixed-tier hull "
        f"{verdict['hull_at_equal_cost']:.3f}.",
        "",
        f"Prompt-only `auto` against the fixed-tier hull at its own cost: as shipped "
        f"{verdict['prompt_only_over_hull_shipped']:+.3f}; along its λ curve at best "
        f"{best[0]:+.3f} ({best[1]:.3f} at {best[2]:.5f} USD).",
        "",
        f"Where prompt-only `auto` sends each kind, on all {len(items)} prompts of the set "
        "(small / medium / large):",
        "",
        "| kind | prompts | small | medium | large |",
        "|---|---|---|---|---|",
    ]
    for kind in KINDS:
        of_kind = [i for i in items if items[i]["kind"] == kind]
        shares = [sum(routed[i]["tier"] == t for i in of_kind) / len(of_kind) for t in TIERS]
        cells = " | ".join(f"{x:.2f}" for x in shares)
        lines.append(f"| {kind} | {len(of_kind)} | {cells} |")
    (results / f"{args.set}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
