"""The cross-encoder call alone, one pair at a time, for one or more model folders.

    python -m bench.perf.verifier_latency [--model DIR ...] [--pairs 200] [--rounds 3]

Each model gets the same pairs: the held-out project pairs and external pairs the rules
leave undecided (what reaches the model in the cache). The models are timed in turn,
round after round (so background load falls on all of them alike), in this process
with one ONNX thread — the embedder worker's setting; the worker adds its pipe round
trip (``bench.perf.cache_latency`` times that). Prints wall-clock p50 / p99 ms per model
per round, the p50 of the call's own CPU time (``process_time``: what the call costs,
less the waits a loaded host adds), and the medians over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from routers.training.verifier_pairs import verifier_pairs
from routers.verifier.model import MODEL_DIR, CrossEncoderVerifier
from routers.verifier.rules import rule_verdict


def open_pairs(count: int) -> list[tuple[str, str]]:
    pairs = verifier_pairs("heldout") + verifier_pairs("external")
    undecided = [(p.a, p.b) for p in pairs if rule_verdict(p.a, p.b)[0] == "undecided"]
    step = max(len(undecided) // count, 1)
    return undecided[::step][:count]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, nargs="+", default=[MODEL_DIR])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    models = {str(m): CrossEncoderVerifier(m) for m in args.model}
    pairs = open_pairs(args.pairs)
    p50s: dict[str, list[float]] = {name: [] for name in models}
    cpu50s: dict[str, list[float]] = {name: [] for name in models}
    for round_ in range(args.rounds):
        for name, model in models.items():
            model.score([pairs[0]])  # warm
            samples, cpu = [], []
            for a, b in pairs:
                t0, c0 = time.perf_counter(), time.process_time()
                model.score([(a, b)])
                samples.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
            p50s[name].append(percentile(samples, 0.5))
            cpu50s[name].append(percentile(cpu, 0.5))
            print(
                f"round {round_} {name}: p50 {percentile(samples, 0.5):.2f} ms, "
                f"p99 {percentile(samples, 0.99):.2f} ms, CPU p50 {percentile(cpu, 0.5):.2f} ms "
                f"({len(samples)} pairs)"
            )
    for name, values in p50s.items():
        cpu = statistics.median(cpu50s[name])
        print(f"{name}: median CPU p50 {cpu:.2f} ms (the call's own CPU time, load-free)")
        print(
            f"{name}: median p50 {statistics.median(values):.2f} ms [{min(values):.2f}-"
            f"{max(values):.2f}]"
        )


if __name__ == "__main__":
    main()
