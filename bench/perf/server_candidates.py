"""Candidate HTTP servers and event loops for the passthrough, side by side in one run.

    python -m bench.perf.server_candidates [--rounds 3] [--seconds 3] [--variants ...]

Serves tiergate's passthrough (``targets.tiergate_config``) under each variant of
``bench/harness/serve_variant.py``: uvicorn with uvloop (what ``tiergate serve`` runs),
uvicorn with rloop (a Rust event loop), granian (a Rust HTTP server) with uvloop and with
rloop. granian and rloop come from ``bench/.venv-candidates`` (made here when missing; it
sees the shared environment's packages and adds only those two). Each variant is pinned to
``--gateway-core``; the upstream and the load generator to ``--client-core``. Rounds
interleave the direct call and the variants, as ``bench/perf/overhead.py`` does; the table
gives medians [range] over rounds.

A variant is kept only if it holds what the gateway promises besides speed, so each is
also started with ``header_timeout_s: 1`` and ``limit_concurrency: 2`` and probed: a
malformed request gets the JSON 400 (``invalid_http_request``), a request past the limit
the JSON 503, and a half-sent request is cut off at the header deadline.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.harness import report, targets
from bench.harness.targets import Process
from bench.harness.venvs import ensure_venv
from bench.perf.overhead import Bench
from bench.perf.phases import Phase
from tiergate_testing.net import free_port

VARIANTS = ("uvicorn+uvloop", "uvicorn+rloop", "granian+uvloop", "granian+rloop")
BASELINE = VARIANTS[0]  # what tiergate serve runs
CANDIDATES_VENV = targets.BENCH / ".venv-candidates"
CANDIDATE_SPECS = ["granian==2.8.7", "rloop==0.5.0"]
PHASES = (
    Phase("0ms c1", "bench-0ms", False, 1),
    Phase("0ms c64", "bench-0ms", False, 64),
    Phase("20ms c64", "bench-20ms", False, 64),
    Phase("stream c64", "bench-stream", True, 64),
)
AUTH = {"authorization": f"Bearer {targets.TENANT_KEY}"}


def start_variant(
    python: Path, name: str, config: dict[str, Any], core: int | None, logs: Path
) -> Process:
    server, loop = name.split("+")
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    argv = [str(python), "-m", "bench.harness.serve_variant", "--config", str(path)]
    argv += ["--port", str(port), "--server", server, "--loop", loop]
    env = targets.base_env(TIERGATE_BENCH_KEY=targets.TENANT_KEY, TIERGATE_LOG_LEVEL="warning")
    return targets.spawn(name, argv, core, port, env, logs, headers=AUTH)


def _exchange(port: int, data: bytes, wait_s: float = 3.0) -> tuple[bytes, bytes]:
    """Send ``data`` on a new connection; the status line and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < 2:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


def _json_error(body: bytes, code: str | None = None) -> bool:
    try:
        error = orjson.loads(body)["error"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and (code is None or error.get("code") == code)


def probe(port: int) -> dict[str, bool]:
    """What the variant holds, on one started with a 1 s header deadline and a limit of 2."""
    status, body = _exchange(port, b"THIS IS NOT HTTP\r\nHost: x\r\n\r\n")
    held = {"json_400": b" 400 " in status and _json_error(body, "invalid_http_request")}
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        time.sleep(0.3)  # both accepted: the limit's two connections are taken
        request = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['authorization']}"
        status, body = _exchange(port, request.encode() + b"\r\n\r\n")
        held["json_503"] = b" 503 " in status and _json_error(body)
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.3)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        sock.settimeout(3.0)
        try:
            held["header_deadline"] = sock.recv(1024) == b""
        except ConnectionResetError:
            held["header_deadline"] = True
        except TimeoutError:
            held["header_deadline"] = False
    return held


def probes(python: Path, upstream: str, variants: list[str], logs: Path) -> dict[str, Any]:
    overlay = {"server": {"header_timeout_s": 1.0, "limit_concurrency": 2}}
    config = targets.tiergate_config(upstream, overlay)
    found: dict[str, Any] = {}
    for name in variants:
        process = start_variant(python, name, config, None, logs / "probes")
        try:
            found[name] = probe(int(process.base_url.rsplit(":", 1)[1]))
        finally:
            process.stop()
    return found


def _median(values: list[float], digits: int = 3) -> str:
    if not values:
        return "-"
    mid, low, high = statistics.median(values), min(values), max(values)
    d = digits
    return f"{mid:.{d}f}" if low == high else f"{mid:.{d}f} [{low:.{d}f}..{high:.{d}f}]"


def table(results: dict[str, dict[str, list[dict[str, Any]]]], held: dict[str, Any]) -> str:
    def values(name: str, phase: str, key: str) -> list[float]:
        return [r[key] for r in results.get(name, {}).get(phase, [])]

    def added(name: str, phase: str, key: str) -> list[float]:
        mine, direct = values(name, phase, key), values("direct", phase, key)
        return [m - d for m, d in zip(mine, direct, strict=False)]

    rows = []
    for name in (n for n in results if n != "direct"):
        cpu = values(name, "0ms c64", "cpu_ms_per_req")
        base = values(BASELINE, "0ms c64", "cpu_ms_per_req")
        ratios = [c / b for c, b in zip(cpu, base, strict=False) if b > 0]
        checks = held.get(name, {})
        rows.append(
            [
                name,
                _median(cpu),
                _median(ratios, 2),
                _median(values(name, "stream c64", "cpu_ms_per_req")),
                _median(added(name, "0ms c1", "latency_p50_ms"), 2),
                _median(added(name, "0ms c1", "latency_p99_ms"), 2),
                _median(added(name, "20ms c64", "latency_p99_ms"), 2),
                _median(values(name, "0ms c64", "throughput"), 0),
                _median(values(name, "stream c64", "stalls"), 0),
                *(
                    ("yes" if checks[k] else "NO") if k in checks else "-"
                    for k in ("json_400", "json_503", "header_deadline")
                ),
            ]
        )
    header = [
        "server + loop",
        "CPU ms/req 0ms c64",
        f"vs {BASELINE}",
        "CPU ms/req stream c64",
        "added p50 0ms c1",
        "added p99 0ms c1",
        "added p99 20ms c64",
        "req/s 0ms c64",
        "stream gaps > 100 ms c64",
        "JSON 400",
        "JSON 503",
        "header deadline",
    ]
    return report.markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--gateway-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/tiergate-bench-servers"))
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(
        CANDIDATES_VENV, "granian", "2.8.7", CANDIDATE_SPECS, args.logs / "venv.log", inherit=True
    )
    # What Bench.load reads of the overhead bench's options.
    bench_args = argparse.Namespace(
        logs=args.logs,
        duration=args.seconds,
        warmup=0.5,
        rounds=args.rounds,
        client_core=args.client_core,
        gateway_core=args.gateway_core,
        redis_url=None,
    )
    bench = Bench(bench_args)
    started = time.monotonic()
    processes: dict[str, Process] = {}
    try:
        upstream = targets.start_upstream(args.client_core, args.logs)
        processes["direct"] = upstream
        config = targets.tiergate_config(upstream.base_url)
        for name in args.variants:
            processes[name] = start_variant(python, name, config, args.gateway_core, args.logs)
        bench.processes = processes
        for process in processes.values():  # lazy imports, pools
            bench.load(process, PHASES[1], duration=1.0)
        bench.rounds(processes, PHASES)
        held = probes(python, upstream.base_url, args.variants, args.logs)
    finally:
        for process in processes.values():
            process.stop()
    print(
        f"\n{args.rounds} rounds x {args.seconds:.0f}s per phase, variants pinned to core "
        f"{args.gateway_core}, load generator and upstream to core {args.client_core}; "
        f"{(time.monotonic() - started) / 60:.1f} min; medians [range] over rounds"
    )
    print(table(bench.results, held))
    print("machine: " + report.machine())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
