"""CPU-seconds per token of each embedded-default model, and the prices they give.

Loads each tier's model as ``config/gateway.yaml`` configures it (threads included), then
times, in this process's CPU time (all threads), a prompt's prefill and a greedy
generation, a few rounds each; the medians per token at ``--usd-per-cpu-s`` are the USD per
million tokens the config charges (cached input: half the input price, the prefix is not
recomputed). Usage: ``python -m bench.live.cpu_prices [--rounds 3] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from backends.model_files import part_paths, prepare_model
from policies.loader import load_config

REPO = Path(__file__).resolve().parents[2]
PROMPT = (
    "Here is a list of tasks for the week: write the quarterly report, review two pull "
    "requests, plan the team offsite, answer the customer emails about invoices, update the "
    "deployment runbook, and prepare slides for Thursday's meeting. "
) * 4 + "Which task should come first, and why?"


def measure(options: dict[str, Any], rounds: int, new_tokens: int) -> dict[str, float]:
    from llama_cpp import Llama

    parts = options.get("model_parts")
    path = prepare_model(
        model_path=options.get("model_path"),
        parts=part_paths(parts, options["part_count"]) if parts else (),
        sha256=options.get("sha256"),
    )
    llama = Llama(
        model_path=path,
        n_ctx=options.get("n_ctx", 2048),
        n_threads=options.get("n_threads"),
        verbose=False,
    )
    tokens = llama.tokenize(PROMPT.encode(), add_bos=True)
    prefill, decode = [], []
    for _ in range(rounds):
        llama.reset()
        start = time.process_time()
        llama.eval(tokens)
        prefill.append((time.process_time() - start) / len(tokens))
        start = time.process_time()
        made = 0
        for _token in llama.generate(tokens, temp=0.0):  # reuses the evaluated prompt
            made += 1
            if made >= new_tokens:
                break
        decode.append((time.process_time() - start) / made)
    llama.close()
    return {
        "prompt_tokens": len(tokens),
        "cpu_s_per_prompt_token": statistics.median(prefill),
        "cpu_s_per_output_token": statistics.median(decode),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, default=REPO / "config" / "gateway.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--usd-per-cpu-s", type=float, default=1e-5)  # $0.01 per 1000 CPU-s
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = load_config(args.config)
    report: dict[str, Any] = {"usd_per_cpu_s": args.usd_per_cpu_s, "tiers": {}}
    for tier, spec in config.tiers.items():
        engine = config.engines[spec.engines[0]]
        got = measure(engine.options or {}, args.rounds, args.new_tokens)
        per_million = args.usd_per_cpu_s * 1e6
        got["usd_per_m_input"] = round(got["cpu_s_per_prompt_token"] * per_million, 2)
        got["usd_per_m_cached_input"] = round(got["usd_per_m_input"] / 2, 2)
        got["usd_per_m_output"] = round(got["cpu_s_per_output_token"] * per_million, 2)
        report["tiers"][tier] = {"model": engine.model, **got}
        print(tier, json.dumps(report["tiers"][tier]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
