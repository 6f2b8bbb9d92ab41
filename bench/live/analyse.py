"""Cost and accuracy of routing policies on the live records (``bench/live/records``).

On the prompts every tier has answered (records are made in one shuffled order, so the
common part is a sample of every kind): always-small, always-medium, always-large, the
cheapest correct tier (an oracle, for scale) and prompt-only ``auto`` as shipped: the tier
``tiergate classify`` picks under ``config/gateway.yaml``'s objective, its answer looked up in
the records. Cost is what the gateway charged (``x-tiergate-cost-usd``, the config's prices)
and the engine CPU-seconds measured while the answer was made.

Usage: ``python -m bench.live.analyse --set heldout`` (after ``bench.live.grade``) writes
``bench/live/results/<set>.md``, ``.json`` and the cost-accuracy plot ``.png``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.live.sets import load

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RECORDS = HERE / "records"
GRADES = HERE / "grades"
RESULTS = HERE / "results"
TIERS = ("small", "medium", "large")
KINDS = ("fact", "chat", "task", "math", "code")


def records(name: str) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for tier in TIERS:
        path = RECORDS / f"{name}-{tier}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if line:
                row = json.loads(line)
                out.setdefault(row["id"], {})[tier] = row
    return out


def auto_tiers(items: list[dict[str, Any]], config: Path) -> dict[str, str]:
    """The tier ``tiergate classify`` gives each prompt under the config's policy."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
        source.write_text(
            "".join(json.dumps({"id": i["id"], "prompt": i["prompt"]}) + "\n" for i in items)
        )
        command = [sys.executable, "-m", "gateway", "classify", str(source), "-o", str(target)]
        subprocess.run([*command, "--config", str(config)], cwd=REPO, check=True)
        rows = [json.loads(line) for line in target.read_text().splitlines() if line]
    return {row["id"]: row["tier"] for row in rows}


def policy(
    name: str,
    choice: dict[str, str],
    ids: list[str],
    kinds: dict[str, str],
    recs: dict[str, dict[str, dict[str, Any]]],
    grades: dict[str, dict[str, int]],
) -> dict[str, Any]:
    correct = [grades[i][choice[i]] for i in ids]
    per_kind = {}
    for kind in KINDS:
        marks = [grades[i][choice[i]] for i in ids if kinds[i] == kind]
        if marks:
            per_kind[kind] = {"n": len(marks), "accuracy": round(sum(marks) / len(marks), 3)}
    shares = {t: round(sum(choice[i] == t for i in ids) / len(ids), 3) for t in TIERS}
    return {
        "policy": name,
        "accuracy": round(sum(correct) / len(ids), 4),
        "usd": sum(recs[i][choice[i]]["cost_usd"] for i in ids),
        "cpu_s": round(sum(recs[i][choice[i]]["cpu_s"] for i in ids), 1),
        "tier_share": shares,
        "per_kind": per_kind,
    }


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, key, label in ((axes[0], "usd", "priced USD"), (axes[1], "cpu_s", "engine CPU-s")):
        for row in rows:
            axis.scatter(row[key], row["accuracy"])
            axis.annotate(row["policy"], (row[key], row["accuracy"]), fontsize=8)
        axis.set_xlabel(label)
        axis.set_ylabel("accuracy")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", default="heldout", choices=["heldout", "fit"])
    parser.add_argument("--config", type=Path, default=REPO / "config" / "gateway.yaml")
    args = parser.parse_args()
    items = {item["id"]: item for item in load(args.set)}
    recs = records(args.set)
    grades = json.loads((GRADES / f"{args.set}.json").read_text())
    ids = [i for i in items if set(TIERS) <= set(recs.get(i, {}))]
    if not ids:
        raise SystemExit("no prompt has records of all three tiers yet")
    kinds = {i: items[i]["kind"] for i in ids}
    routed = auto_tiers(list(items.values()), args.config)  # every prompt, recorded or not
    auto = {i: routed[i] for i in ids}
    oracle = {i: next((t for t in TIERS if grades[i][t]), "small") for i in ids}
    rows = [
        *(policy(f"always-{t}", dict.fromkeys(ids, t), ids, kinds, recs, grades) for t in TIERS),
        policy("auto (prompt-only, shipped)", auto, ids, kinds, recs, grades),
        policy("oracle (cheapest correct)", oracle, ids, kinds, recs, grades),
    ]
    cpu = next(iter(next(iter(recs.values())).values())).get("cpu", "unknown CPU")
    mix = {k: sum(v == k for v in kinds.values()) for k in KINDS}
    RESULTS.mkdir(exist_ok=True)
    summary = {"set": args.set, "prompts": len(ids), "of": len(items), "mix": mix, "cpu": cpu}
    (RESULTS / f"{args.set}.json").write_text(
        json.dumps({**summary, "policies": rows}, indent=1) + "\n"
    )
    title = f"{args.set}: {len(ids)} prompts answered by all three tiers ({cpu}, 2 cores)"
    plot(rows, RESULTS / f"{args.set}.png", title)
    lines = [
        f"# Live bench, {args.set} set",
        "",
        f"{len(ids)} of {len(items)} prompts have records of all three tiers "
        f"(mix: {', '.join(f'{k} {n}' for k, n in mix.items())}); {cpu}, 2 cores shared "
        "with other work, one llama.cpp thread per engine (bench/live/gateway-1thread.yaml).",
        "",
        "| policy | accuracy | priced USD | engine CPU-s | small / medium / large | "
        + " | ".join(KINDS)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(KINDS),
    ]
    for row in rows:
        share = " / ".join(f"{row['tier_share'][t]:.2f}" for t in TIERS)
        per_kind = " | ".join(
            f"{row['per_kind'][k]['accuracy']:.2f}" if k in row["per_kind"] else "-" for k in KINDS
        )
        lines.append(
            f"| {row['policy']} | {row['accuracy']:.3f} | {row['usd']:.5f} | "
            f"{row['cpu_s']:.0f} | {share} | {per_kind} |"
        )
    lines += [
        "",
        f"Where prompt-only `auto` sends each kind, on all {len(items)} prompts of the set "
        "(small / medium / large):",
        "",
        "| kind | prompts | small | medium | large |",
        "|---|---|---|---|---|",
    ]
    for kind in KINDS:
        of_kind = [i for i in items if items[i]["kind"] == kind]
        shares = [sum(routed[i] == t for i in of_kind) / len(of_kind) for t in TIERS]
        cells = " | ".join(f"{x:.2f}" for x in shares)
        lines.append(f"| {kind} | {len(of_kind)} | {cells} |")
    (RESULTS / f"{args.set}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
