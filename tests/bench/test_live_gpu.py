"""The live bench on GPU tiers (bench/gpu/live.py) without a GPU: the config it serves
validates as gpu-3tier's tiers under the shipped routing, and ``--dir`` moves the grades of
the CPU records out of bench/live/ without changing them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from bench.gpu.live import bench_config, gpus_needed
from policies.loader import load_config, parse_config
from tests.support import PYTHON, REPO

LIVE = REPO / "bench" / "live"


def test_the_served_config_is_gpu_3tiers_tiers_under_the_shipped_routing() -> None:
    source = REPO / "config" / "examples" / "gpu-3tier.yaml"
    config = bench_config(source)
    served = parse_config(yaml.safe_dump(config), "served.yaml")
    gpu, shipped = load_config(source), load_config(REPO / "config" / "gateway.yaml")
    assert served.tiers == gpu.tiers and served.engines == gpu.engines
    assert served.prices == gpu.prices and served.routing == shipped.routing
    assert served.redis_url is None and list(served.tenants) == ["demo"]
    assert served.tenants["demo"].escalation == shipped.tenants["demo"].escalation
    assert gpus_needed(config) == 6  # GPUs 0-5: 1B on 0, 8B on 1, 70B over 2-5


def test_grade_under_dir_grades_the_records_as_the_default_does(tmp_path: Path) -> None:
    (tmp_path / "records").mkdir()
    ids: set[str] = set()
    for tier in ("small", "medium", "large"):
        lines = (LIVE / "records" / f"heldout-{tier}.jsonl").read_text().splitlines()[:6]
        (tmp_path / "records" / f"heldout-{tier}.jsonl").write_text("\n".join(lines) + "\n")
        ids |= {json.loads(line)["id"] for line in lines}
    before = (LIVE / "grades" / "heldout.json").read_bytes()
    command = [PYTHON, "-m", "bench.live.grade", "--set", "heldout", "--dir", str(tmp_path)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=120)
    graded = json.loads((tmp_path / "grades" / "heldout.json").read_text())
    checked_in = json.loads(before)
    assert set(graded) == ids
    assert all(graded[i] == {t: checked_in[i][t] for t in graded[i]} for i in ids)
    assert (LIVE / "grades" / "heldout.json").read_bytes() == before
