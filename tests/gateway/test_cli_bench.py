"""`tiergate bench NAME` runs the named script from bench/ and passes its exit status on."""

from __future__ import annotations

import subprocess

import pytest

from gateway.cli import BENCHMARKS
from tests.support import PYTHON, REPO, subprocess_env


def test_every_named_benchmark_exists() -> None:
    assert all((REPO / "bench" / script).is_file() for script in BENCHMARKS.values())


@pytest.mark.slow
def test_bench_runs_the_semantic_pair_evaluation() -> None:
    run = subprocess.run(
        [PYTHON, "-m", "gateway", "bench", "cache-pairs"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "precision 1.000" in run.stdout
