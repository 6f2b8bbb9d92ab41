"""The live bench (``bench/live``) on GPU tiers: record, grade, analyse in one command.

Each tier of ``--config`` (default ``config/examples/gpu-3tier.yaml``: Llama 3.2 1B, 3.1 8B,
3.1 70B on in-process vLLM) answers the held-out set once through a real ``tiergate serve``,
with its token log-probabilities; the answers are graded and the policies analysed exactly as
``bench/live`` does for the embedded CPU tiers. The server runs on a config derived from
``--config`` (written to ``DIR/config.yaml``): its engines, tiers and prices, the shipped
``auto`` (``config/gateway.yaml``'s routing and its demo tenant's escalation), state in the
process (no Redis). Records, grades and results go to
``--dir`` (default ``bench/gpu/live``) and, when ``$OUT`` is set, are copied there (one set's
run is 8 files, what the device tool brings back at most).

    bench/gpu/live.sh                 # installs vLLM and tiergate into .venv-gpu, then this
    python -m bench.gpu.live --limit 20 --config my-one-gpu.yaml

Checks first that the machine has the GPUs the config places engines on (``--check``: only
that, before anything is installed) and that vLLM is installed; after recording, that every
tier's answers carry log-probabilities (escalation judges the cheap answer by them): exit
status 1 if a tier's do not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "config" / "gateway.yaml"


def bench_config(source: Path) -> dict[str, Any]:
    """``source``'s engines, tiers and prices under the shipped routing, with the shipped demo
    tenant (its escalation, which ``bench.live.analyse`` replays; no cache)."""
    config = yaml.safe_load(source.read_text())
    shipped = yaml.safe_load(SHIPPED.read_text())
    demo = {key: v for key, v in shipped["tenants"]["demo"].items() if key != "cache"}
    kept = {key: config[key] for key in ("engines", "tiers", "prices")}
    return {**kept, "tenants": {"demo": demo}, "routing": shipped["routing"]}


def gpus_needed(config: dict[str, Any]) -> int:
    """GPUs the vLLM engines are placed on (``device_ids``, else ``tensor_parallel_size``)."""
    need = 0
    for engine in config["engines"].values():
        if engine["backend"] != "vllm":
            continue
        options = engine.get("options") or {}
        ids = options.get("device_ids") or range(options.get("tensor_parallel_size", 1))
        need = max(need, max(ids) + 1)
    return need


def gpus() -> list[str]:
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (FileNotFoundError, subprocess.CalledProcessError):
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.strip()]


def without_logprobs(records: Path, name: str) -> dict[str, int]:
    """Per tier, the answers that came back with no token log-probabilities."""
    missing = {}
    for path in sorted(records.glob(f"{name}-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line]
        answered = [row for row in rows if "error" not in row and row["completion_tokens"]]
        missing[path.stem] = sum(not row["logprobs"] for row in answered)
        print(f"{path.stem}: {len(answered)} answers, {missing[path.stem]} without logprobs")
    return missing


def step(module: str, *args: str) -> None:
    subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the live bench on GPU tiers")
    parser.add_argument("--config", type=Path, default=REPO / "config/examples/gpu-3tier.yaml")
    parser.add_argument("--dir", type=Path, default=REPO / "bench/gpu/live")
    parser.add_argument("--set", default="heldout", choices=["heldout", "fit"])
    parser.add_argument("--limit", type=int, default=0, help="at most this many prompts a tier")
    parser.add_argument("--ready-s", type=float, default=3600, help="to download and load")
    parser.add_argument("--check", action="store_true", help="only check the GPUs are here")
    args = parser.parse_args(argv)
    config = bench_config(args.config)
    cards, need = gpus(), gpus_needed(config)
    if len(cards) < need:
        print(f"{args.config} places engines on {need} GPUs; this machine has {len(cards)}")
        return 2
    if args.check:
        return 0
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: bench/gpu/live.sh installs it into .venv-gpu")
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    served = args.dir / "config.yaml"
    made = f"# made by bench.gpu.live from {args.config.name}\n"
    served.write_text(made + yaml.safe_dump(config, sort_keys=False))
    setup = (
        f"GPUs: {', '.join(cards) or 'none'}; {args.config.name}'s engines, one request at a "
        "time; engine CPU-s is the gateway process's alone (vLLM's engine core is a child "
        "process): compare priced USD"
    )
    common = ["--set", args.set, "--dir", str(args.dir)]
    limit = ["--limit", str(args.limit)] if args.limit else []
    ready = ["--ready-s", str(args.ready_s)]
    try:
        step("bench.live.record", *common, "--config", str(served), *ready, *limit)
        step("bench.live.grade", *common)
        step("bench.live.analyse", *common, "--config", str(served), "--setup", setup)
        missing = without_logprobs(args.dir / "records", args.set)
    finally:
        if os.environ.get("OUT"):  # the device tool copies $OUT back
            shutil.copytree(args.dir, os.environ["OUT"], dirs_exist_ok=True)
    return 1 if any(missing.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
