"""Gateway overhead, tiergate next to LiteLLM proxy and Envoy, in one run on this machine.

    python -m bench.perf.overhead            # full run (about 12 minutes on 2 cores)
    python -m bench.perf.overhead --quick    # a smoke run (about 4 minutes)
    python -m bench.perf.overhead --quick --wire-only --rounds 5   # each wire format next to chat

Starts a local OpenAI-compatible upstream (0 ms and 20 ms answers, streaming and not),
tiergate passing requests straight to it, LiteLLM proxy configured the same way (own
virtual environment, ``bench/.venv-litellm``), Envoy 1.40.0 as a plain HTTP/1.1 reverse
proxy to the same upstream (the floor: ``bench/harness/envoy.py``, ``bench/.venv-envoy``),
and tiergate with the full pipeline.
Each gateway is pinned to the same core; the load generator runs in its own process
pinned to the other core. Closed-loop phases run in rounds that interleave the targets,
so background noise hits all of them alike; the table gives the median over rounds and
the range. Then an open-loop request-rate ramp finds the sustained requests/s (< 1%
errors, >= 97% of the offered rate served, p99 under 500 ms; "≥" where the load
generator's core, not the gateway's, ran out). The full pipeline's table
also gives the CPU milliseconds per request of every process a request passes through
(gateway, embedder workers, load generator, upstream, the pipeline's Redis: a private
redis-server unless ``--redis-url`` names one) and their ceiling: 1000 x cores / sum.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.harness import envoy, gc_scrape, report, targets
from bench.harness.targets import Process
from bench.perf.phases import MESSAGES, PHASES, PIPELINE_PHASES, Phase
from bench.perf.wire_formats import WIRE_FORMATS, wire_phases

EMBED_WORKER = "routers.embed_worker"  # the embedder worker processes' command line


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.logs: Path = args.logs
        self.results: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.processes: dict[str, Process] = {}
        self.seeds = 0  # every load run gets prompts no earlier run sent (no cache hits)

    def load(
        self,
        target: Process,
        phase: Phase,
        *,
        model: str | None = None,
        rate: float | None = None,
        duration: float | None = None,
        api_key: str | None = None,
    ) -> dict[str, Any]:
        host_port = target.base_url.removeprefix("http://")
        host, _, port = host_port.partition(":")
        wire = WIRE_FORMATS[phase.api]
        body: dict[str, Any] = {"model": model or phase.model, wire.prompt_key: MESSAGES}
        body.update(wire.extra)
        if phase.stream:
            body["stream"] = True
        spec = {
            "host": host,
            "port": int(port),
            "path": wire.path,
            "stream_end": wire.stream_end,
            "body": body,
            "api_key": api_key or targets.TENANT_KEY,
            "concurrency": phase.concurrency,
            "duration": duration or self.args.duration * (2 if phase.stream else 1),
            # Streams record from the start: a slow gateway may finish none after a warmup.
            "warmup": 0.0 if phase.stream else self.args.warmup,
            "rate": rate,
            "max_inflight": 512,
            "stall_s": 0.1,
            "vary": True,
            "seed": self.seeds,
        }
        self.seeds += 1
        argv = [sys.executable, str(targets.HARNESS / "loadgen.py"), json.dumps(spec)]
        if self.args.client_core is not None:
            argv = ["taskset", "-c", str(self.args.client_core), *argv]
        # tiergate's GC pauses over the phase (its /metrics, read outside the CPU window)
        tiergate = target.name.startswith("tiergate")
        gc_before = gc_scrape.scrape(target.base_url) if tiergate else None
        cpu_before = target.cpu_seconds() if target.name != "upstream" else 0.0
        embed_before = target.cpu_seconds(EMBED_WORKER) if target.name != "upstream" else 0.0
        others_before = self.other_cpu_seconds(target)
        core_before = targets.core_busy_seconds(self.args.gateway_core)
        wall_before = time.monotonic()
        done = subprocess.run(
            argv, capture_output=True, text=True, check=False, env=targets.base_env(), timeout=600
        )
        if done.returncode != 0:
            raise RuntimeError(f"load generator failed: {done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(done.stdout)
        if target.name != "upstream":
            self.add_other_cpu(result, target, others_before)
            # Every request the gateway answered in the window, warmup included.
            cpu = target.cpu_seconds() - cpu_before
            result["cpu_ms_per_req"] = cpu * 1000 / max(result["completed_total"], 1)
            # The embedder workers' part of it (0 where the model runs in no worker).
            embed = target.cpu_seconds(EMBED_WORKER) - embed_before
            result["embedder_cpu_share"] = embed / cpu if cpu > 0 else 0.0
            # How much of the gateway's core other processes took meanwhile (shared machine).
            busy = targets.core_busy_seconds(self.args.gateway_core) - core_before
            wall = time.monotonic() - wall_before
            result["foreign_core_share"] = min(max(busy - cpu, 0.0) / wall, 1.0)
            # The load generator's and the upstream's CPU: a core's worth, and they are
            # the limit, not the gateway (they share the client core).
            client_ms = result["load_cpu_ms_per_req"] + result["upstream_cpu_ms_per_req"]
            result["client_cpu_share"] = client_ms * result["completed_total"] / 1000 / wall
            # Every process a request passes through; the host's cores cap req/s at this.
            result["all_cpu_ms_per_req"] = result["cpu_ms_per_req"] + sum(
                result[f"{name}_cpu_ms_per_req"] for name in ("load", "upstream", "redis")
            )
            cores = len(os.sched_getaffinity(0))
            result["ceiling_rps"] = 1000 * cores / max(result["all_cpu_ms_per_req"], 1e-6)
        if gc_before is not None:
            result.update(gc_scrape.phase(gc_before, gc_scrape.scrape(target.base_url)))
            if "gc_collected" in result:
                result["gc_collected_per_req"] = result["gc_collected"] / max(
                    result["completed_total"], 1
                )
        return result

    def other_cpu_seconds(self, target: Process) -> dict[str, float]:
        """CPU seconds so far of what serves a request besides the gateway: the load
        generator (a reaped child: ``RUSAGE_CHILDREN``), the upstream, and Redis (for the
        full pipeline; a shared server counts everyone's work, a private one only ours)."""
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        upstream = self.processes.get("direct")
        return {
            "load": children.ru_utime + children.ru_stime,
            "upstream": upstream.cpu_seconds() if upstream is not None else 0.0,
            "redis": (
                targets.redis_cpu_seconds(self.args.redis_url)
                if target.name == "tiergate-pipeline"
                else 0.0
            ),
        }

    def add_other_cpu(
        self, result: dict[str, Any], target: Process, before: dict[str, float]
    ) -> None:
        after = self.other_cpu_seconds(target)
        n = max(result["completed_total"], 1)
        for name, value in after.items():
            result[f"{name}_cpu_ms_per_req"] = (value - before[name]) * 1000 / n

    def settle(self, processes: dict[str, Process], limit_s: float = 60.0) -> None:
        """Wait until every gateway is idle again: a gateway still working off abandoned
        requests (LiteLLM after a phase it could not keep up with) must not steal the core
        from the next one."""
        gateways = [p for name, p in processes.items() if name != "direct"]
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            before = sum(p.cpu_seconds() for p in gateways)
            time.sleep(0.3)
            if sum(p.cpu_seconds() for p in gateways) - before < 0.03:  # under 10% of a core
                return
        print(f"  (gateways still busy after {limit_s:.0f}s; going on)", flush=True)

    def record(self, target: str, phase: str, result: dict[str, Any]) -> None:
        self.results.setdefault(target, {}).setdefault(phase, []).append(result)

    def rounds(
        self,
        processes: dict[str, Process],
        phases: tuple[Phase, ...],
        models: dict[str, str] | None = None,
    ) -> None:
        for round_no in range(self.args.rounds):
            for phase in phases:
                for name, process in processes.items():
                    self.settle(self.processes)
                    result = self.load(process, phase, model=(models or {}).get(name))
                    self.record(name, phase.name, result)
                    print(
                        f"  round {round_no + 1} {phase.name:11} {name:18} "
                        f"p50 {_ms(result['latency_p50_ms'])} p99 {_ms(result['latency_p99_ms'])}"
                        f" {result['throughput']:7.0f} req/s  errors {result['errors']}"
                        + (
                            f"  GC {result['gc_collections']:.0f} pauses, longest <= "
                            f"{result['gc_longest_ms']:g}ms"
                            if "gc_collections" in result
                            else ""
                        )
                        + (
                            f"  (others used {100 * result['foreign_core_share']:.0f}% of the "
                            "gateway core)"
                            if "foreign_core_share" in result
                            else ""
                        ),
                        flush=True,
                    )

    def warm(self, processes: dict[str, Process]) -> None:
        """Every model through every target once under load (lazy imports, pools, JIT caches)."""
        for process in processes.values():
            for phase in (PHASES[1], PHASES[4], PHASES[6]):
                self.load(process, phase, duration=self.args.warmup * 2)

    def ramp(self, process: Process, closed_loop_rps: float) -> dict[str, Any]:
        """Offered load up x1.25 a step until a step fails twice; the last passing rate wins.

        It starts at a third of what the closed loop at concurrency 64 achieved; while no
        step has passed yet, a failure halves the rate instead (a noisy start must not
        end the ramp at zero)."""
        phase = Phase("ramp", "bench-0ms", False, 0)
        rate = max(self.args.ramp_start, closed_loop_rps / 3)
        best, failures, steps, client_bound = 0.0, 0, [], False
        while failures < 2 and self.args.ramp_start / 2 <= rate <= self.args.ramp_max:
            self.settle(self.processes)
            result = self.load(process, phase, rate=rate, duration=self.args.ramp_step)
            offered = int(rate * self.args.ramp_step)
            error_rate = result["errors"] / max(offered, 1)
            p99 = result["latency_p99_ms"] or 0.0
            # Sustained: under 1% errors, the offered rate served, and no runaway queue
            # (a p99 under 500 ms still admits LiteLLM's GC pauses of about 400 ms).
            passed = error_rate < 0.01 and result["ok"] >= 0.97 * offered and p99 < 500
            steps.append({"rate": rate, "passed": passed, **result})
            print(
                f"  ramp {process.name:18} {rate:7.0f} req/s offered: {result['ok']} ok, "
                f"{result['errors']} errors, p99 {_ms(p99)} {'pass' if passed else 'FAIL'}",
                flush=True,
            )
            if passed:
                best, failures, client_bound = rate, 0, False
                rate *= 1.25
            elif best == 0.0:
                rate /= 2
            else:
                failures += 1
                rate *= 1.25
                # A step lost with the client's core saturated says nothing of the gateway.
                client_bound = client_bound or result["client_cpu_share"] >= 0.9
        # Ended by the cap, or by the load generator's core: the gateway could do more.
        client_bound = client_bound or (failures < 2 and best > 0)
        return {"sustained_rps": best, "steps": steps, "client_bound": client_bound}


def _ms(value: float | None) -> str:
    return "   -    " if value is None else f"{value:7.2f}ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 round, short phases")
    parser.add_argument("--wire-only", action="store_true", help="only the wire-format table")
    parser.add_argument("--rounds", type=int, default=None, help="override the rounds")
    parser.add_argument("--gateway-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM (no ratios)")
    parser.add_argument("--no-envoy", action="store_true", help="skip Envoy (no floor)")
    parser.add_argument("--no-pipeline", action="store_true", help="skip the full pipeline")
    parser.add_argument(
        "--pipeline-overlay",
        type=Path,
        default=targets.HARNESS / "pipeline-overlay.yaml",
        help="YAML merged over the passthrough config for the full pipeline",
    )
    parser.add_argument(
        "--embedder-core",
        type=int,
        default=None,
        help="pin the pipeline's embedder workers to this core (default: the gateway's)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL", "private"),
        help="the pipeline's Redis; 'private' (default): a redis-server of this run's own",
    )
    parser.add_argument("--logs", type=Path, default=Path("/tmp/tiergate-bench"))
    parser.add_argument("--json", type=Path, default=None, help="write all results here")
    args = parser.parse_args(argv)
    args.rounds, args.duration, args.warmup = (
        (args.rounds or 1, 2.0, 0.5) if args.quick else (args.rounds or 3, 3.0, 0.5)
    )
    if args.wire_only:  # tiergate's passthrough alone, chat next to every other format
        args.no_litellm = args.no_envoy = args.no_pipeline = True
    args.ramp_step, args.ramp_start, args.ramp_max = (
        (2.0, 5.0, 6000.0) if args.quick else (4.0, 5.0, 8000.0)
    )

    bench = Bench(args)
    started = time.monotonic()
    processes: dict[str, Process] = {}
    private_redis = None
    folder = tempfile.TemporaryDirectory()
    try:
        if args.redis_url == "private" and not args.no_pipeline:
            private_redis, args.redis_url = targets.start_private_redis(Path(folder.name))
        upstream = targets.start_upstream(args.client_core, args.logs)
        processes["direct"] = upstream
        processes["tiergate"] = targets.start_tiergate(
            "tiergate", targets.tiergate_config(upstream.base_url), args.gateway_core, args.logs
        )
        if not args.no_litellm:
            processes["litellm"] = targets.start_litellm(
                upstream.base_url, args.gateway_core, args.logs
            )
        if not args.no_envoy:
            processes["envoy"] = envoy.start_envoy(upstream.base_url, args.gateway_core, args.logs)
        pipeline_note = None
        if not args.no_pipeline:
            try:
                overlay = yaml.safe_load(args.pipeline_overlay.read_text()) or {}
                config = targets.pipeline_config(upstream.base_url, args.redis_url, overlay)
                processes["tiergate-pipeline"] = targets.start_tiergate(
                    "tiergate-pipeline", config, args.gateway_core, args.logs
                )
            except (RuntimeError, OSError) as exc:
                pipeline_note = f"full pipeline did not start: {exc}"
                print(pipeline_note, flush=True)
        print(
            f"targets up in {time.monotonic() - started:.0f}s: "
            + ", ".join(f"{k} {v.base_url}" for k, v in processes.items()),
            flush=True,
        )
        bench.processes = processes
        main_targets = {k: v for k, v in processes.items() if k != "tiergate-pipeline"}
        bench.warm(processes)
        if not args.wire_only:
            bench.rounds(main_targets, PHASES)
        bench.rounds({"tiergate": processes["tiergate"]}, wire_phases(Phase))
        pipeline = processes.get("tiergate-pipeline")
        ramps: dict[str, Any] = {}
        if pipeline is not None:
            trio = {
                "direct": processes["direct"],
                "tiergate": processes["tiergate"],
                **({"litellm": processes["litellm"]} if "litellm" in processes else {}),
                "tiergate-pipeline": pipeline,
            }
            if args.embedder_core is not None:
                targets.pin_children(pipeline, EMBED_WORKER, args.embedder_core)
            bench.rounds(trio, PIPELINE_PHASES, models={"tiergate-pipeline": "auto"})
        for name, p in processes.items():
            if name in ("tiergate", "litellm", "envoy") and not args.wire_only:
                c64 = statistics.median(r["throughput"] for r in bench.results[name]["0ms c64"])
                ramps[name] = bench.ramp(p, c64)
        memory = {name: p.peak_rss_mb() for name, p in processes.items()}
    finally:
        for process in processes.values():
            process.stop()
        if private_redis is not None:
            private_redis.terminate()
            private_redis.wait(10)
        elif "tiergate-pipeline" in processes:
            dropped = targets.drop_pipeline_keys(args.redis_url)
            print(f"removed {dropped} Redis keys under {targets.pipeline_prefix()}*", flush=True)
        folder.cleanup()
    elapsed = time.monotonic() - started
    table = (
        report.wire_table(bench.results)
        if args.wire_only
        else report.render(bench.results, ramps, memory, args, elapsed, pipeline_note)
    )
    print(table)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "results": bench.results,
                    "ramps": ramps,
                    "memory_mb": memory,
                    "elapsed_s": elapsed,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
