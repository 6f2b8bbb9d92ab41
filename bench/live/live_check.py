"""The shipped ``auto`` with escalation, run live, against what the records predict.

Starts ``tiergate serve`` on the shipped ``config/gateway.yaml`` and asks ``--n`` held-out
prompts (those every tier has records of, in the records' shuffled order) as its demo
tenant would: ``model: auto``, greedy, the kind's ``max_tokens``, past the cache, one at a
time. The gateway's headers say which tier answered, whether a cheap answer was kept or
re-asked (``x-tiergate-escalated``) and what it cost; the answer is graded as the records
are. The prediction replays the same prompts on the records (``bench.live.escalate``):
``tiergate classify`` on just these prompts, so λ is the quality model's reference λ, as
in a gateway that has pooled fewer than ``target.min_samples`` requests.

Usage: ``python -m bench.live.live_check --n 60`` writes ``bench/live/results/live-check.md``
and ``.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.live.analyse import REPO, TIERS, auto_rows, records
from bench.live.escalate import decisions, escalated, spec_of
from bench.live.grade import grade
from bench.live.record import KEY, cpu_name, cpu_seconds, free_port, start_gateway
from bench.live.sets import load

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def ask(client: httpx.Client, process: psutil.Process, item: dict[str, Any]) -> dict[str, Any]:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": item["prompt"]}],
        "max_tokens": item["max_tokens"],
        "temperature": 0,
    }
    cpu, wall = cpu_seconds(process), time.monotonic()
    response = client.post(
        "/v1/chat/completions", json=body, headers={"cache-control": "no-cache, no-store"}
    )
    cpu, wall = cpu_seconds(process) - cpu, time.monotonic() - wall
    response.raise_for_status()
    choice = response.json()["choices"][0]
    escalation = response.headers.get("x-tiergate-escalated")
    return {
        "id": item["id"],
        "kind": item["kind"],
        "tier": response.headers["x-tiergate-tier"],
        "escalated": None if escalation is None else escalation == "true",
        "signal": response.headers.get("x-tiergate-escalation-signal"),
        "cost_usd": float(response.headers.get("x-tiergate-cost-usd", "nan")),
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "answer": choice["message"].get("content") or "",
        "finish_reason": choice["finish_reason"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--config", type=Path, default=REPO / "config" / "gateway.yaml")
    args = parser.parse_args()
    items = {item["id"]: item for item in load("heldout")}
    recs = records(HERE / "records", "heldout")
    grades = json.loads((HERE / "grades" / "heldout.json").read_text())
    recorded = [i for i in items if set(TIERS) <= set(recs.get(i, {}))]
    ids = sorted(recorded, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[: args.n]
    plans = decisions(
        auto_rows([items[i] for i in ids], args.config),
        {i: items[i]["prompt"] for i in ids},
        args.config,
    )
    spec = spec_of(args.config)
    predicted = {i: escalated(plans[i], spec, recs[i], grades[i]) for i in ids}
    port = free_port()
    proc = start_gateway(args.config, port, 900)
    process = psutil.Process(proc.pid)
    live = []
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"authorization": f"Bearer {KEY}"},
            timeout=900,
        ) as client:
            for n, ident in enumerate(ids, 1):
                row = ask(client, process, items[ident])
                row["correct"] = int(grade(items[ident], row))
                live.append(row)
                if n % 10 == 0:
                    print(f"live: {n}/{len(ids)}", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    pairs = [(row, predicted[row["id"]]) for row in live]
    same_tier = sum(row["tier"] == p.tier for row, p in pairs)
    same_path = sum(row["escalated"] == p.escalated for row, p in pairs)
    summary = {
        "prompts": len(ids),
        "cpu": cpu_name(),
        "config": str(args.config.relative_to(REPO)),
        "escalation": spec.model_dump(),
        "live": {
            "accuracy": round(sum(r["correct"] for r in live) / len(live), 4),
            "usd": sum(r["cost_usd"] for r in live),
            "cheap_first": sum(r["escalated"] is not None for r in live),
            "escalated": sum(bool(r["escalated"]) for r in live),
        },
        "predicted": {
            "accuracy": round(sum(p.correct for _, p in pairs) / len(pairs), 4),
            "usd": sum(p.usd for _, p in pairs),
            "cheap_first": sum(p.escalated is not None for _, p in pairs),
            "escalated": sum(bool(p.escalated) for _, p in pairs),
        },
        "same_final_tier": same_tier,
        "same_escalation_path": same_path,
        "same_grade": sum(row["correct"] == p.correct for row, p in pairs),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "live-check.json").write_text(
        json.dumps({**summary, "rows": live}, indent=1, ensure_ascii=False) + "\n"
    )
    lines = [
        "# Live check: the shipped `auto` with escalation against the records' prediction",
        "",
        f"{len(ids)} held-out prompts, `{summary['config']}` (the demo tenant's escalation: "
        f"margin {spec.margin:g}, threshold {spec.threshold:g}), {summary['cpu']}, 2 cores.",
        "",
        "| | accuracy | priced USD | cheap tier first | escalated |",
        "|---|---|---|---|---|",
    ]
    for name in ("live", "predicted"):
        part = summary[name]
        lines.append(
            f"| {name} | {part['accuracy']:.3f} | {part['usd']:.5f} | "
            f"{part['cheap_first']} | {part['escalated']} |"
        )
    lines += [
        "",
        f"Same final tier on {same_tier}/{len(ids)} prompts, same escalation path "
        f"(none / kept / re-asked) on {same_path}/{len(ids)}, same grade on "
        f"{summary['same_grade']}/{len(ids)}.",
    ]
    (RESULTS / "live-check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
