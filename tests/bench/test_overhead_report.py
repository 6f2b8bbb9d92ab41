"""The overhead bench's table: the Envoy column, both ratio columns, issue 42's goals,
and the ramp's "client-bound" mark, from made-up rounds (no processes)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bench.harness import report
from bench.harness.targets import Process
from bench.perf import overhead

ARGS = argparse.Namespace(rounds=2, duration=3.0, warmup=0.5, gateway_core=0, client_core=1)


def _round(p50: float, p99: float, **extra: float) -> dict[str, Any]:
    return {"latency_p50_ms": p50, "latency_p99_ms": p99, "errors": 0, **extra}


def _runs(tiergate_c1_p99: float, stalls: float) -> report.Runs:
    phases = {
        "0ms c1": (1.0, 2.0),
        "20ms c64": (22.0, 30.0),
        "0ms c64": (5.0, 9.0),
        "stream c64": (0.0, 0.0),
    }
    # added p50 / p99 over the direct call at 0ms c1 and 20ms c64; CPU ms per request
    added = {
        "tiergate": ({"0ms c1": (1.0, tiergate_c1_p99), "20ms c64": (8.0, 15.0)}, 0.45),
        "litellm": ({"0ms c1": (10.0, 17.0), "20ms c64": (300.0, 800.0)}, 9.8),
        "envoy": ({"0ms c1": (0.2, 4.0), "20ms c64": (3.0, 10.0)}, 0.04),
    }
    runs: report.Runs = {"direct": {}}
    for phase, (p50, p99) in phases.items():
        runs["direct"][phase] = [_round(p50, p99), _round(p50, p99)]
    for target, (latencies, cpu) in added.items():
        runs[target] = {}
        for phase, (p50, p99) in phases.items():
            a50, a99 = latencies.get(phase, (0.0, 0.0))
            extra = {"cpu_ms_per_req": cpu, "stalls": stalls, "throughput": 900.0}
            runs[target][phase] = [_round(p50 + a50, p99 + a99, **extra)] * 2
    return runs


RAMPS = {
    "tiergate": {"sustained_rps": 1500.0, "client_bound": False},
    "litellm": {"sustained_rps": 90.0, "client_bound": False},
    "envoy": {"sustained_rps": 4800.0, "client_bound": True},
}


def _table(runs: report.Runs) -> str:
    memory = {"direct": 30.0, "tiergate": 150.0, "litellm": 420.0, "envoy": 75.0}
    return report.render(runs, RAMPS, memory, ARGS, 60.0, None)


def _row(table: str, label: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {label} "))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_every_row_has_the_envoy_column_and_both_ratios() -> None:
    table = _table(_runs(tiergate_c1_p99=7.0, stalls=0))
    header = _row(table, "metric")
    assert header[2:] == ["tiergate", "litellm", "envoy", "tiergate / litellm", "tiergate / envoy"]
    cpu = _row(table, "CPU ms per request, 0ms c64")
    assert cpu[2:] == ["0.450", "9.800", "0.040", "0.046x", "11.25x"]
    # Envoy's ramp ran out of client core: at least its rate, at most tiergate's ratio
    sustained = _row(table, "sustained req/s, open-loop ramp (<1% errors)")
    assert sustained[4] == "≥ 4800"
    assert sustained[6] == "≤ 0.31x"
    assert "the gateway's own ceiling is higher" in table


def test_the_goals_say_which_are_met() -> None:
    table = _table(_runs(tiergate_c1_p99=7.0, stalls=0))
    assert _row(table, "added p99, 0ms c1 <= 2x Envoy's")[2:] == ["1.75x", "met"]
    assert _row(table, "CPU ms per request, 0ms c64 <= 3x Envoy's")[2:] == ["11.25x", "NOT met"]
    assert _row(table, "added p99, 20ms c64 <= 2x Envoy's")[2:] == ["1.50x", "met"]
    assert _row(table, "sustained req/s >= 15x LiteLLM's")[2:] == ["16.67x", "met"]
    assert _row(table, "streams with a gap > 100 ms at c64: 0 (every round)")[3] == "met"
    worse = _table(_runs(tiergate_c1_p99=9.0, stalls=1))
    assert _row(worse, "added p99, 0ms c1 <= 2x Envoy's")[2:] == ["2.25x", "NOT met"]
    assert _row(worse, "streams with a gap > 100 ms at c64: 0 (every round)")[3] == "NOT met"


def test_without_envoy_there_is_no_envoy_column_and_no_goals() -> None:
    runs = _runs(tiergate_c1_p99=7.0, stalls=0)
    del runs["envoy"]
    table = _table(runs)
    assert _row(table, "metric")[2:] == ["tiergate", "litellm", "tiergate / litellm"]
    assert "goals:" not in table


class _Ramp(overhead.Bench):
    """A ramp against a made-up gateway that serves up to ``limit`` req/s."""

    def __init__(self, limit: float, client_share: float) -> None:
        args = argparse.Namespace(ramp_start=5.0, ramp_max=8000.0, ramp_step=1.0, logs=None)
        super().__init__(args)
        self.limit, self.client_share = limit, client_share

    def settle(self, processes: Any, limit_s: float = 60.0) -> None:
        return None

    def load(self, target: Any, phase: Any, **kwargs: Any) -> dict[str, Any]:
        rate = kwargs["rate"]
        served = rate <= self.limit
        return {
            "ok": int(rate) if served else 0,
            "errors": 0 if served else int(rate),
            "latency_p99_ms": 5.0,
            "client_cpu_share": self.client_share if not served else 0.5,
        }


@pytest.mark.parametrize(
    ("limit", "client_share", "bound"),
    [(1000.0, 0.3, False), (1000.0, 0.97, True), (1e9, 0.3, True)],
    ids=["gateway-bound", "client-core-saturated", "past-the-cap"],
)
def test_the_ramp_marks_a_rate_the_client_limited(
    limit: float, client_share: float, bound: bool
) -> None:
    bench = _Ramp(limit, client_share)
    result = bench.ramp(cast(Process, SimpleNamespace(name="gateway")), 300.0)
    assert result["client_bound"] is bound
    assert 0 < result["sustained_rps"] <= min(limit, 8000.0)
