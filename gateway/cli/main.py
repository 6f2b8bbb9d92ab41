"""``tiergate`` (also ``python -m gateway``): serve, check-config, and the routing tools."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gateway.money.part_pricing import unpriced_notes
from gateway.settings import get_settings, load_effective_config
from policies.loader import ConfigError, load_config
from policies.mcp_spec import mcp_notes


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.admin.auth import weak_admin_key
    from gateway.app import create_app
    from gateway.edge.server import server_config

    started = time.perf_counter()
    try:
        config = load_effective_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    weak = weak_admin_key(config)
    if weak is not None:
        print(weak, file=sys.stderr)
        return 2
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    app = create_app(config, lambda: load_effective_config(args.config))
    logging.getLogger("gateway").info("config loaded in %.2fs", time.perf_counter() - started)
    options = server_config(
        app,
        config,
        host=host,
        port=port,
        log_level=get_settings().log_level,
        access_log=args.access_log,
        loop="auto",
        timeout_graceful_shutdown=config.server.shutdown_grace_s,
    )
    server = uvicorn.Server(options)
    server.run()
    return 0 if server.started else 3  # 3: the lifespan failed (uvicorn's startup failure)


def cmd_check_config(args: argparse.Namespace) -> int:
    failed = False
    for path in args.files:
        try:
            config = load_config(path)
        except ConfigError as exc:
            failed = True
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            continue
        tiers = ", ".join(config.tiers)
        print(
            f"{path}: ok ({len(config.engines)} engines, tiers {tiers}, "
            f"{len(config.tenants)} tenants)"
        )
        for note in [*unpriced_notes(config), *mcp_notes(config.mcp, os.environ)]:
            print(f"{path}: note: {note}")
    return 1 if failed else 0


BENCHMARKS = {  # name -> module under bench/ (run as ``python -m bench.<module>``)
    "overhead": "perf.overhead",  # tiergate vs LiteLLM proxy and Envoy; the full pipeline
    "servers": "perf.server_candidates",  # uvicorn / granian x uvloop / rloop, passthrough
    "classify": "perf.classify_latency",
    "embed-cpu": "perf.embed_cpu",  # CPU ms per embedding: gateway side and embedder worker
    "onnx-rows": "perf.onnx_rows",  # one ONNX run per text vs batched rows: CPU and cosine
    "pipeline-cpu": "perf.pipeline_cpu",  # CPU ms per `auto` request, every process
    "cache": "perf.cache_latency",
    "cache-pairs": "experiments.cache_pairs",
    "cache-verifier": "experiments.verifier_candidates",  # the verifier's candidates side by side
    "budgets": "perf.budget_overhead",
    "keys": "perf.keys_overhead",  # API-managed keys vs YAML keys, passthrough CPU per request
    "observability": "perf.observability_overhead",
    "embedded": "perf.embedded",
    "embeddings": "perf.embeddings",  # /v1/embeddings through the gateway vs the embedder
    "vllm": "gpu.vllm_inprocess",
}


def cmd_bench(args: argparse.Namespace) -> int:
    import os
    import subprocess

    checkout = Path(__file__).resolve().parents[2]
    module = BENCHMARKS[args.name]
    script = Path("bench", *module.split(".")).with_suffix(".py")
    if not (checkout / script).is_file():
        print(f"{script} not found: benchmarks run from a source checkout", file=sys.stderr)
        return 2
    # The checkout first on the child's path: ``bench`` is a folder of it, not a package
    # the install ships; the working directory stays the caller's (paths in args).
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(checkout), env.get("PYTHONPATH")) if p)
    return subprocess.call([sys.executable, "-m", f"bench.{module}", *args.args], env=env)


Command = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiergate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML config (default: $TIERGATE_CONFIG or config/gateway.yaml)",
    )
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000)")
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check-config", help="validate YAML config files")
    check.add_argument("files", nargs="+", type=Path)
    check.set_defaults(func=cmd_check_config)

    bench = sub.add_parser(
        "bench",
        help="run a benchmark script from the repository's bench/ folder",
        description="Benchmarks live in bench/ of a source checkout: " + ", ".join(BENCHMARKS),
    )
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    bench.add_argument("args", nargs=argparse.REMAINDER, help="passed to the script")
    bench.set_defaults(func=cmd_bench)

    from gateway.cli import classifier, evaluate

    classifier.add_commands(sub)
    evaluate.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=get_settings().log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    args = build_parser().parse_args(argv)
    func: Command = args.func
    return func(args)
