"""Objects left in reference cycles per request, per route: what only a garbage
collection frees, and what makes a young collection long enough to stall every stream
(docs/performance.md, "GC pauses and the stall").

    python -m bench.perf.gc_cycles                 # passthrough routes and auto (~30 s)
    python -m bench.perf.gc_cycles --no-auto --requests 200

The same measurement as tests/gateway/test_reference_cycles.py (``tiergate_testing.cycles``):
a gateway in this process on uvloop, the fake upstream in its own, requests from the
standard library's client with the collector off, then one collection; a table of
objects per request and the kinds found.
"""

from __future__ import annotations

import argparse
import os

from bench.harness.report import machine, markdown_table
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.cycles import (
    Probe,
    gateway_on_uvloop,
    passthrough_config,
    routed_config,
    routes,
    upstream_process,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100, help="per route")
    parser.add_argument("--no-auto", action="store_true", help="skip auto (classifier, caches)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    rows: list[list[str]] = []
    with upstream_process() as upstream:
        setups = [("passthrough", passthrough_config(upstream), routes("bench-0ms"))]
        if not args.no_auto:
            auto = {k: v for k, v in routes("auto").items() if k in ("chat", "chat stream")}
            setups.append(("auto", routed_config(upstream), auto))
        for label, config, chosen in setups:
            with gateway_on_uvloop(config) as gateway:
                probe = Probe(gateway)
                for name, route in chosen.items():
                    garbage = probe.garbage(route, args.requests)
                    rows.append(
                        [
                            f"{label}: {name}",
                            f"{garbage.per_request:.2f}",
                            garbage.top(6) or "-",
                        ]
                    )
                    print(f"  {rows[-1][0]}: {rows[-1][1]} per request", flush=True)
    print(
        markdown_table(
            ["route", "objects in cycles per request", "kinds found (all requests)"], rows
        )
    )
    print(f"{args.requests} requests per route after 5 of warmup; machine: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
