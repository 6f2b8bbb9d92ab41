"""One table from one run: medians over rounds with their range, tiergate / LiteLLM and
tiergate / Envoy ratios, and issue 42's goals."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.perf.wire_formats import WIRE_FORMATS

Runs = dict[str, dict[str, list[dict[str, Any]]]]
PEERS: tuple[str, ...] = ("litellm", "envoy")  # tiergate / peer ratio columns, where the peer ran

# The pipeline's stages, in request order, as they appear in tiergate's Server-Timing
# header: the tracing stage names (gateway/telemetry/tracing.py) plus the laps "parse" and "route".
STAGES = (
    ("auth", "authenticate the key"),
    ("parse", "read + validate the body"),
    ("cache.exact", "exact cache lookup (a hit skips classification)"),
    ("embedding", "embed the prompt"),
    ("classification", "complexity classifier"),
    ("cache.lookup", "semantic cache lookup"),
    ("route", "tier decision"),
    ("budget.reservation", "rate limits + budget reservation (Redis)"),
    ("settlement", "pricing the usage, cache fill"),
    ("budget.settle", "budget settlement (Redis)"),
)
ENGINE_STAGE = "engine"


def _stat(values: list[float]) -> tuple[float, float, float] | None:
    return (statistics.median(values), min(values), max(values)) if values else None


def _fixed(value: float) -> tuple[float, float, float]:
    """One figure (no rounds) as a median and its range."""
    return value, value, value


def _fmt(stat: tuple[float, float, float] | None, digits: int = 2) -> str:
    if stat is None:
        return "-"
    mid, low, high = stat
    if low == high:
        return f"{mid:.{digits}f}"
    return f"{mid:.{digits}f} [{low:.{digits}f}..{high:.{digits}f}]"


def _ratio(a: tuple[float, float, float] | None, b: tuple[float, float, float] | None) -> str:
    if a is None or b is None or b[0] == 0:
        return "-"
    return f"{a[0] / b[0]:.3f}x" if a[0] / b[0] < 0.1 else f"{a[0] / b[0]:.2f}x"


def _values(runs: Runs, target: str, phase: str, key: str) -> list[float]:
    return [r[key] for r in runs.get(target, {}).get(phase, []) if r.get(key) is not None]


def _per_target(
    runs: Runs, phase: str, key: str
) -> Callable[[str], tuple[float, float, float] | None]:
    """A target's figure ``key`` in ``phase``: its median over rounds and their range."""
    return lambda target: _stat(_values(runs, target, phase, key))


def _added_per_target(
    runs: Runs, phase: str, key: str
) -> Callable[[str], tuple[float, float, float] | None]:
    """A gateway's added ``key`` in ``phase`` (over the direct call): median and range."""
    return lambda target: _stat(_added(runs, target, phase, key))


def _added(runs: Runs, target: str, phase: str, key: str) -> list[float]:
    """Per round: the gateway's figure minus the direct call's from the same round."""
    mine, direct = _values(runs, target, phase, key), _values(runs, "direct", phase, key)
    return [m - d for m, d in zip(mine, direct, strict=False)]


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    kernel = platform.release()
    memory = subprocess.run(["free", "-g"], capture_output=True, text=True, check=False)
    total = memory.stdout.split("\n")[1].split()[1] if memory.returncode == 0 else "?"
    return (
        f"{model}, {os.cpu_count()} cores, {total} GiB RAM, Linux {kernel}, "
        f"Python {platform.python_version()}; load average at the end "
        f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}"
    )


def render(
    runs: Runs,
    ramps: dict[str, dict[str, Any]],
    memory: dict[str, float],
    args: argparse.Namespace,
    elapsed: float,
    pipeline_note: str | None,
) -> str:
    gateways: list[str] = [g for g in ("tiergate", "litellm", "envoy") if g in runs]
    peers: list[str] = [g for g in PEERS if g in runs]  # a ratio column each
    header = ["metric", "direct", *gateways, *(f"tiergate / {p}" for p in peers)]
    rows: list[list[str]] = []

    def row(
        label: str,
        get: Callable[[str], tuple[float, float, float] | None],
        direct: tuple[float, float, float] | None = None,
        digits: int = 2,
    ) -> None:
        stats = {g: get(g) for g in gateways}
        line = [label, _fmt(direct, digits), *(_fmt(stats[g], digits) for g in gateways)]
        line += [_ratio(stats["tiergate"], stats[p]) for p in peers]
        rows.append(line)

    for phase in ("0ms c1", "0ms c16", "0ms c64", "20ms c1", "20ms c16", "20ms c64"):
        for q in ("p50", "p99"):
            key = f"latency_{q}_ms"
            row(
                f"added latency {q} ms, {phase}",
                _added_per_target(runs, phase, key),
                _stat(_values(runs, "direct", phase, key)),
            )
    for phase in ("stream c16", "stream c64"):
        for q in ("p50", "p99"):
            key = f"ttfb_{q}_ms"
            row(
                f"stream first byte {q} ms, {phase}",
                _per_target(runs, phase, key),
                _stat(_values(runs, "direct", phase, key)),
            )
    row(
        "stream: largest inter-chunk gap ms, c64",
        lambda g: _stat(_values(runs, g, "stream c64", "max_gap_ms")),
        _stat(_values(runs, "direct", "stream c64", "max_gap_ms")),
    )
    row(
        "stream: largest gap beyond the upstream's ms, c64",
        lambda g: _stat(_values(runs, g, "stream c64", "max_excess_gap_ms")),
        _stat(_values(runs, "direct", "stream c64", "max_excess_gap_ms")),
    )
    row(
        "stream: streams with such a gap > 100 ms, c64",
        lambda g: _stat(_values(runs, g, "stream c64", "stalls")),
        _stat(_values(runs, "direct", "stream c64", "stalls")),
        digits=0,
    )
    # The GC (tiergate's /metrics: bench/harness/gc_scrape.py): a young collection stops
    # the loop, and every stream in flight with it (docs/performance.md, "GC pauses").
    for phase in ("0ms c16", "stream c64"):
        row(
            f"GC pauses (collections), {phase}",
            _per_target(runs, phase, "gc_collections"),
            digits=0,
        )
        row(
            f"GC: longest pause ms (at most), {phase}",
            _per_target(runs, phase, "gc_longest_ms"),
            digits=1,
        )
        row(
            f"GC: objects freed (in cycles) per request, {phase}",
            _per_target(runs, phase, "gc_collected_per_req"),
        )
    row(
        "throughput req/s, closed loop 0ms c64",
        lambda g: _stat(_values(runs, g, "0ms c64", "throughput")),
        _stat(_values(runs, "direct", "0ms c64", "throughput")),
        digits=0,
    )
    sustained = {g: _fixed(ramps[g]["sustained_rps"]) if g in ramps else None for g in gateways}
    rows.append(
        [
            "sustained req/s, open-loop ramp (<1% errors)",
            "-",
            *(
                ("≥ " if ramps.get(g, {}).get("client_bound") else "") + _fmt(sustained[g], 0)
                for g in gateways
            ),
            # A peer's ramp bound by the client: the ratio is at most this.
            *(
                ("≤ " if ramps.get(p, {}).get("client_bound") else "")
                + _ratio(sustained["tiergate"], sustained[p])
                for p in peers
            ),
        ]
    )
    row(
        "CPU ms per request, 0ms c64",
        lambda g: _stat(_values(runs, g, "0ms c64", "cpu_ms_per_req")),
        digits=3,
    )
    row(
        "CPU ms per request, stream c64",
        lambda g: _stat(_values(runs, g, "stream c64", "cpu_ms_per_req")),
        digits=3,
    )
    row(
        "peak RSS MB",
        lambda g: _fixed(memory[g]) if g in memory else None,
        _fixed(memory["direct"]) if "direct" in memory else None,
        digits=0,
    )
    row(
        "other processes' share of the gateway core, %",
        lambda g: _stat(
            [
                100 * v
                for p in runs.get(g, {}).values()
                for v in (r.get("foreign_core_share") for r in p)
                if v is not None
            ]
        ),
        digits=0,
    )
    errors = {g: sum(r["errors"] for p in runs.get(g, {}).values() for r in p) for g in runs}

    out = [markdown_table(header, rows), ""]
    if any(ramps.get(g, {}).get("client_bound") for g in gateways):
        out.append(
            "≥: the ramp ended with the load generator's core (shared with the upstream) "
            "saturated; the gateway's own ceiling is higher"
        )
    if "envoy" in runs:
        out += [goals_table(runs, ramps), ""]
    out.append("errors in closed-loop phases: " + ", ".join(f"{g} {n}" for g, n in errors.items()))
    out.append(
        f"rounds {args.rounds} x {args.duration:.0f}s per phase (+{args.warmup:.1f}s "
        f"warmup); gateways pinned to core {args.gateway_core}, load generator and "
        f"upstream to core {args.client_core}; whole run {elapsed / 60:.1f} min"
    )
    out.append("machine: " + machine())
    out.append("")
    out.append(pipeline_table(runs, pipeline_note))
    out.append("")
    out.append(wire_table(runs))
    return "\n".join(out)


def goals_table(runs: Runs, ramps: dict[str, dict[str, Any]]) -> str:
    """Issue 42's goals for the passthrough, against Envoy (and LiteLLM), from this run."""

    def added(target: str, phase: str) -> float | None:
        stat = _stat(_added(runs, target, phase, "latency_p99_ms"))
        return stat[0] if stat else None

    def cpu(target: str) -> float | None:
        stat = _stat(_values(runs, target, "0ms c64", "cpu_ms_per_req"))
        return stat[0] if stat else None

    def sustained(target: str) -> float | None:
        return ramps[target]["sustained_rps"] if target in ramps else None

    def times(mine: float | None, theirs: float | None, most: float, least: bool) -> list[str]:
        if mine is None or theirs is None or theirs <= 0:
            return ["-", "-", "not measured"]
        ratio = mine / theirs
        met = ratio >= most if least else ratio <= most
        return [f"{mine:.3f} / {theirs:.3f}", f"{ratio:.2f}x", "met" if met else "NOT met"]

    stalls = _values(runs, "tiergate", "stream c64", "stalls")
    rows = [
        ["added p99, 0ms c1 <= 2x Envoy's", *times(added("tiergate", "0ms c1"),
            added("envoy", "0ms c1"), 2.0, False)],
        ["CPU ms per request, 0ms c64 <= 3x Envoy's", *times(cpu("tiergate"), cpu("envoy"),
            3.0, False)],
        ["added p99, 20ms c64 <= 2x Envoy's", *times(added("tiergate", "20ms c64"),
            added("envoy", "20ms c64"), 2.0, False)],
        ["sustained req/s >= 15x LiteLLM's", *times(sustained("tiergate"),
            sustained("litellm"), 15.0, True)],
        ["streams with a gap > 100 ms at c64: 0 (every round)",
            " / ".join(f"{v:.0f}" for v in stalls) or "-", "-",
            ("met" if not any(stalls) else "NOT met") if stalls else "not measured"],
    ]  # fmt: skip
    header = ["goal (issue 42)", "tiergate / peer (medians)", "ratio", "verdict"]
    return "goals:\n" + markdown_table(header, rows)


def wire_table(runs: Runs) -> str:
    """tiergate's passthrough CPU per request in each wire format, next to chat's in the
    same rounds (phases ``API KIND c16`` of bench/perf/overhead.py's WIRE_PHASES)."""
    mine = runs.get("tiergate", {})
    # Only the wire formats' own phases: the full pipeline's ``pipe 0ms c16`` is not one.
    apis = [a for a in WIRE_FORMATS if a != "chat" and f"{a} 0ms c16" in mine]
    if "chat 0ms c16" not in mine or not apis:
        return "wire formats: not measured"
    rows: list[list[str]] = []
    for kind in ("0ms", "stream"):
        chat = _values(runs, "tiergate", f"chat {kind} c16", "cpu_ms_per_req")
        rows.append([f"chat, {kind} c16", _fmt(_stat(chat), 3), "1.00x"])
        for api in apis:
            other = _values(runs, "tiergate", f"{api} {kind} c16", "cpu_ms_per_req")
            ratios = [o / c for o, c in zip(other, chat, strict=False) if c > 0]
            rows.append([f"{api}, {kind} c16", _fmt(_stat(other), 3), _fmt(_stat(ratios), 2)])
    header = ["tiergate passthrough", "CPU ms per request", "vs chat, per round"]
    return "wire formats (medians [range] over rounds):\n" + markdown_table(header, rows)


def pipeline_table(runs: Runs, note: str | None) -> str:
    if "tiergate-pipeline" not in runs:
        return "full pipeline: not measured" + (f" ({note})" if note else "")
    # ``auto`` through the full pipeline next to passthrough (and LiteLLM where it ran).
    columns = ["tiergate", *(["litellm"] if "litellm" in runs else []), "tiergate-pipeline"]
    rows: list[list[str]] = []

    def line(label: str, phase: str, key: str, added: bool = False, digits: int = 2) -> None:
        pick = _added if added else _values
        rows.append([label, *(_fmt(_stat(pick(runs, g, phase, key)), digits) for g in columns)])

    for phase in ("pipe 0ms c1", "pipe 0ms c16"):
        for q in ("p50", "p99"):
            line(f"added latency {q} ms, {phase[5:]}", phase, f"latency_{q}_ms", added=True)
    line("req/s, 0ms c16", "pipe 0ms c16", "throughput", digits=0)
    line("gateway CPU ms / request, 0ms c16", "pipe 0ms c16", "cpu_ms_per_req")
    line("embedder workers' share of that CPU, 0ms c16", "pipe 0ms c16", "embedder_cpu_share")
    line("load generator CPU ms / request, 0ms c16", "pipe 0ms c16", "load_cpu_ms_per_req")
    line("upstream CPU ms / request, 0ms c16", "pipe 0ms c16", "upstream_cpu_ms_per_req")
    line("Redis CPU ms / request, 0ms c16", "pipe 0ms c16", "redis_cpu_ms_per_req")
    line("all processes' CPU ms / request, 0ms c16", "pipe 0ms c16", "all_cpu_ms_per_req")
    cores = len(os.sched_getaffinity(0))
    line(f"ceiling req/s on {cores} cores, 0ms c16", "pipe 0ms c16", "ceiling_rps", digits=0)
    for q in ("p50", "p99"):
        line(f"stream first byte {q} ms, 0 ms stream c16", "pipe stream c16", f"ttfb_{q}_ms")
    header = ["full pipeline vs passthrough", "passthrough", *(
        ["LiteLLM"] if "litellm" in runs else []), "full pipeline (auto)"]  # fmt: skip
    out = [markdown_table(header, rows), ""]
    # Stage shares at concurrency 1: no queueing, so the stages add up to the overhead.
    timing_runs = runs["tiergate-pipeline"].get("pipe 0ms c1", [])
    added = _stat(_added(runs, "tiergate-pipeline", "pipe 0ms c1", "latency_p50_ms"))
    means: dict[str, list[float]] = {}
    for run in timing_runs:
        for name, value in run.get("timing_p50_ms", {}).items():
            means.setdefault(name, []).append(value)
    stage_rows: list[list[str]] = []
    accounted = 0.0
    for name, what in STAGES:
        if name not in means:
            stage_rows.append([name, what, "absent", "-"])
            continue
        mean = statistics.median(means[name])
        accounted += mean
        share = f"{100 * mean / added[0]:.0f}%" if added and added[0] > 0 else "-"
        stage_rows.append([name, what, f"{mean:.3f}", share])
    direct = _stat(_values(runs, "direct", "pipe 0ms c1", "latency_p50_ms"))
    if ENGINE_STAGE in means and direct is not None:
        # The engine stage is the upstream call as the gateway sees it; beyond what a
        # direct call takes, it is the gateway's HTTP client.
        client = statistics.median(means[ENGINE_STAGE]) - direct[0]
        accounted += client
        share = f"{100 * client / added[0]:.0f}%" if added and added[0] > 0 else "-"
        stage_rows.append(
            ["engine - direct", "HTTP client to the upstream", f"{client:.3f}", share]
        )
    if added is not None:
        rest = added[0] - accounted
        stage_rows.append(
            [
                "(rest)",
                "HTTP server, middleware, response JSON, event loop",
                f"{rest:.3f}",
                f"{100 * rest / added[0]:.0f}%" if added[0] else "-",
            ]
        )
    if added is not None:
        stage_rows.append(["(added p50)", "gateway minus direct call", f"{added[0]:.3f}", "100%"])
    out.append(
        markdown_table(["stage", "what", "median ms (0ms c1)", "share of added p50"], stage_rows)
    )
    return "\n".join(out)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    return "\n".join(lines)
