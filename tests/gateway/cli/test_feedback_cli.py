"""``tiergate train-classifier --from-traffic``: the refit from the labels in the shared
store (a real Redis), run as the command line runs it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from policies.stores.feedback import Label
from policies.stores.feedback_redis import RedisFeedbackStore
from policies.stores.store_redis import RedisStore
from routers.features import FEATURES
from routers.refit import Correction
from tests.redis_servers import REDIS7_URL, delete_prefix, unique_root
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import subprocess_env


def labels(n: int) -> list[Label]:
    """The smallest tier is acceptable for one kind of request (one side of an embedding
    direction) and not for the other: something the shipped model cannot know."""
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        kind = bool(rng.random() < 0.5)
        vector = rng.normal(0, 0.02, 384)
        vector[3] += 0.5 if kind else -0.5
        vector /= np.linalg.norm(vector)
        features = tuple(float(x) for x in rng.normal(0, 1, len(FEATURES)))
        ref = ("medium", 2e-6)
        out.append(
            Label(f"r{i}", "small", kind, "judge", vector.astype(np.float16).tobytes(),
                  features, 1000.0 + i, "acme", ref[0], 1e-6, ref[1])
        )  # fmt: skip
    return out


async def fill(root: str, found: list[Label]) -> None:
    owner = RedisStore(REDIS7_URL, root=root)
    try:
        store = RedisFeedbackStore(owner)
        for label in found:
            await store.add_label(label, max_labels=10_000, max_age_s=1e10)
    finally:
        await owner.aclose()


async def read(root: str) -> tuple[int, list[str]]:
    owner = RedisStore(REDIS7_URL, root=root)
    try:
        store = RedisFeedbackStore(owner)
        version, _ = await store.serving()
        return version, [f"{e.decision}:{e.by}" for e in await store.refits(5)]
    finally:
        await owner.aclose()


def test_refit_from_traffic_writes_checks_and_publishes(tmp_path: Path) -> None:
    root = unique_root()
    config = fake_config()
    config.update(redis_url=REDIS7_URL, redis_prefix=root)
    config["routing"] = {"classifier": {}, "feedback": {"judge": {"tier": "large"}}}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / "refit.npz"
    argv = [sys.executable, "-m", "gateway", "train-classifier", "--from-traffic"]
    argv += ["--config", str(path), "--out", str(out)]
    try:
        empty = subprocess.run(argv, env=subprocess_env(), capture_output=True, text=True)
        assert empty.returncode == 1 and "too few labels" in empty.stderr
        asyncio.run(fill(root, labels(400)))
        dry = subprocess.run(argv, env=subprocess_env(), capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.startswith("accepted: hold-out log-loss")
        assert "fitted on 300 labels, checked on the newest 100" in dry.stdout
        assert Correction.from_bytes(out.read_bytes()).fitted == (300, 0, 0)
        assert asyncio.run(read(root)) == (0, [])  # without --publish nothing serves
        published = subprocess.run(
            [*argv, "--publish"], env=subprocess_env(), capture_output=True, text=True
        )
        assert published.returncode == 0, published.stderr
        assert "published: serving version 1" in published.stdout
        assert asyncio.run(read(root)) == (1, ["accepted:cli"])
    finally:
        delete_prefix(REDIS7_URL, root)


def test_from_traffic_needs_feedback_and_a_shared_store(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(fake_config(), sort_keys=False))
    argv = [sys.executable, "-m", "gateway", "train-classifier", "--from-traffic"]
    plain = subprocess.run(
        [*argv, "--config", str(path)], env=subprocess_env(), capture_output=True, text=True
    )
    assert plain.returncode == 2 and "routing.feedback is not configured" in plain.stderr
    config = fake_config()
    config["routing"] = {"feedback": {"judge": {"tier": "large"}}}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    local = subprocess.run(
        [*argv, "--config", str(path)], env=subprocess_env(), capture_output=True, text=True
    )
    assert local.returncode == 2 and "set redis_url" in local.stderr
