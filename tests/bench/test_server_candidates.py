"""The server candidates bench's probes, on a real tiergate (uvicorn, as ``tiergate
serve`` runs it) and on a bare server that holds none of the three promises."""

from __future__ import annotations

import pytest

from bench.perf import server_candidates
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import running_gateway
from tiergate_testing.upstream import running_upstream

pytestmark = pytest.mark.timeout(60)


def test_the_probes_find_what_tiergate_serve_holds() -> None:
    config = fake_config()
    config["server"] = {"header_timeout_s": 1.0, "limit_concurrency": 2}
    with running_gateway(config) as gateway:
        held = server_candidates.probe(gateway.port)
    assert held == {"json_400": True, "json_503": True, "header_deadline": True}


def test_the_probes_report_what_a_bare_server_lacks() -> None:
    # The fake upstream: raw httptools, closes on a parse error, no limit, no deadline.
    with running_upstream() as upstream:
        held = server_candidates.probe(upstream.port)
    assert held == {"json_400": False, "json_503": False, "header_deadline": False}


def test_the_table_names_each_variant_and_what_it_held() -> None:
    def run(cpu: float) -> dict[str, float]:
        figures = {"latency_p50_ms": 1.0, "latency_p99_ms": 2.0, "throughput": 900.0}
        return {**figures, "cpu_ms_per_req": cpu, "stalls": 0.0}

    results = {
        "direct": {"0ms c1": [run(0.0)]},
        "uvicorn+uvloop": {"0ms c64": [run(0.5), run(0.6)]},
        "granian+rloop": {"0ms c64": [run(0.45), run(0.6)]},
    }
    held = {"granian+rloop": {"json_400": False, "json_503": False, "header_deadline": False}}
    lines = server_candidates.table(results, held).splitlines()
    granian = [cell.strip() for cell in lines[3].strip("|").split("|")]
    assert granian[:3] == ["granian+rloop", "0.525 [0.450..0.600]", "0.95 [0.90..1.00]"]
    assert granian[-3:] == ["NO", "NO", "NO"]
