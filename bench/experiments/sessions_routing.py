"""The synthetic agent sessions through ``tiergate classify``, per-turn routing against
``routing.sessions``: tier switches per session, the tiers every turn lands on, and λ.

``classify`` treats its input as the recent traffic (λ from the rows' own sketch once
they are ``target.min_samples`` or more), so this is the steady state the gateway reaches
once its window is full; ``bench/experiments/sessions.py`` is the gateway itself, from a
cold start (the reference traffic's λ for its first 200 requests).

    python -m bench.experiments.sessions_routing [--sessions 40]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

from bench.harness.agent_sessions import SHORT_SYSTEM, SYSTEM, sessions
from tiergate_testing.gateways import REPO

SHIPPED = REPO / "config" / "gateway.yaml"


def classify(turns: Path, config: Path) -> list[dict[str, object]]:
    for _ in range(3):  # the embedder worker may be restarted on a loaded host: once more
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "classify", str(turns), "--config", str(config)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            return [json.loads(line) for line in done.stdout.splitlines()]
    raise RuntimeError(done.stderr[-2000:])


def report(rows: list[dict[str, object]]) -> dict[str, object]:
    by: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by[str(row["id"]).split("-")[0]].append(str(row["tier"]))
    return {
        "sessions_that_switch": sum(1 for t in by.values() if len(set(t)) > 1),
        "switches": sum(sum(a != b for a, b in pairwise(t)) for t in by.values()),
        "first_turn_tiers": dict(Counter(t[0] for t in by.values())),
        "tiers": dict(Counter(str(r["tier"]) for r in rows)),
        "lambda": rows[0]["lambda"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # the shipped config, its embedder worker given longer on a loaded host (a batch of
        # 512 texts), and the same without sessions
        slow = "    max_wait_ms: 0\n    worker_timeout_s: 300\n    "
        shipped = SHIPPED.read_text().replace("    max_wait_ms: 0 ", slow, 1)
        on, off = tmp / "on.yaml", tmp / "off.yaml"
        on.write_text(shipped)
        sessions_off = "\n  default_tier: small\n  sessions: null\n"
        off.write_text(shipped.replace("\n  default_tier: small\n", sessions_off))
        for name, system in (("agent", SYSTEM), ("short", SHORT_SYSTEM)):
            turns = tmp / f"{name}.jsonl"
            with turns.open("w") as handle:
                for i, session in enumerate(sessions(args.sessions, system=system)):
                    for k, messages in enumerate(session):
                        handle.write(json.dumps({"id": f"{i}-{k}", "messages": messages}) + "\n")
            for phase, config in (("before", off), ("after", on)):
                row = {"system": name, "phase": phase, **report(classify(turns, config))}
                print(json.dumps(row))


if __name__ == "__main__":
    main()
