"""tiergate's app under a candidate HTTP server and event loop, for
``bench/perf/server_candidates.py``.

    python -m bench.harness.serve_variant --config C.yaml --port P --server uvicorn --loop uvloop
    python -m bench.harness.serve_variant ... --server granian --loop rloop

``uvicorn`` serves as ``tiergate serve`` does (``gateway.edge.server.server_config``: the
header deadline, JSON 400s for what the parser rejects, the concurrency limit's JSON
503); a loop other than uvloop reaches it as a loop factory. ``granian`` (a Rust HTTP
server; ASGI, one worker, one runtime thread) serves the same app from ``create_app``:
it has no place for the gateway's protocol subclass, so none of those three is there
(the candidates bench probes each server for them). granian and rloop are no
dependencies of tiergate: they come from ``bench/.venv-candidates``, which the
candidates bench makes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

CONFIG_ENV = "TIERGATE_VARIANT_CONFIG"  # the config path, for granian's worker process


def make_app() -> Any:
    """The gateway's ASGI app from the config in ``$TIERGATE_VARIANT_CONFIG``."""
    from gateway.app import create_app
    from gateway.settings import load_effective_config

    path = Path(os.environ[CONFIG_ENV])
    return create_app(load_effective_config(path), lambda: load_effective_config(path))


def serve_uvicorn(port: int, loop: str) -> None:
    import uvicorn

    from gateway.edge.server import server_config
    from gateway.settings import load_effective_config

    config = load_effective_config(Path(os.environ[CONFIG_ENV]))
    options = server_config(
        make_app(),
        config,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        # A custom loop is named by its factory's import string.
        loop="uvloop" if loop == "uvloop" else "rloop:new_event_loop",
    )
    uvicorn.Server(options).run()


def serve_granian(port: int, loop: str) -> None:
    from granian import Granian

    server = Granian(
        f"{__name__}:make_app",
        factory=True,
        address="127.0.0.1",
        port=port,
        interface="asgi",
        workers=1,
        runtime_threads=1,
        loop=loop,
        http="1",
        websockets=False,
        log_level="warning",
    )
    server.serve()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server", choices=("uvicorn", "granian"), required=True)
    parser.add_argument("--loop", choices=("uvloop", "rloop"), required=True)
    args = parser.parse_args()
    os.environ[CONFIG_ENV] = str(args.config)
    serve = serve_uvicorn if args.server == "uvicorn" else serve_granian
    serve(args.port, args.loop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
