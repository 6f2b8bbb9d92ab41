"""`tiergate bench NAME` runs the named module of bench/ and passes its exit status on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway.cli.main import BENCHMARKS
from tests.support import PYTHON, REPO
from tiergate_testing.gateways import subprocess_env


def test_every_named_benchmark_exists() -> None:
    scripts = [
        Path("bench", *module.split(".")).with_suffix(".py") for module in BENCHMARKS.values()
    ]
    assert all((REPO / script).is_file() for script in scripts)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_starts_from_any_folder(name: str, tmp_path: Path) -> None:
    """Run from elsewhere than the checkout: each module finds bench/ and tiergate_testing
    as packages (no ``sys.path`` edits), so ``--help`` parses and exits 0."""
    run = subprocess.run(
        [PYTHON, "-m", "gateway", "bench", name, "--help"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage:")


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
