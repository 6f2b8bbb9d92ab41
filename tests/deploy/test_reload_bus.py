"""A policy reload on one front reaches every front through Redis, within a second.

Three real fronts (uvicorn on loopback) share the real Redis and read their config
files; the reload is called on one of them only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.cluster.reload_bus import config_version
from policies.loader import load_config
from tests.redis_servers import REDIS7_URL, delete_prefix
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

ADMIN_KEY = "tg-admin-key-for-bus-tests"


def config_at(prefix: str, thresholds: tuple[float, float]) -> dict[str, Any]:
    config = fake_config()
    config["admin"] = {"key_from_env": "TIERGATE_BUS_ADMIN_KEY"}
    config["redis_url"] = REDIS7_URL
    config["redis_prefix"] = prefix
    config["cache"] = {"key_prefix": f"{prefix}:cache"}
    config["routing"] = {"thresholds": list(thresholds)}
    return config


class Fronts:
    def __init__(self, fronts: list[RunningGateway], files: list[Path], prefix: str) -> None:
        self.fronts = fronts
        self.files = files
        self.prefix = prefix

    def write(self, index: int, thresholds: tuple[float, float]) -> None:
        self.files[index].write_text(yaml.safe_dump(config_at(self.prefix, thresholds)))

    def readyz(self, index: int) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(self.fronts[index].base_url + "/readyz").json()
        return body

    def reload(self, index: int) -> httpx.Response:
        return httpx.post(
            self.fronts[index].base_url + "/admin/api/policies/reload",
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
            timeout=10,
        )

    def until_all_run(self, version: str, timeout_s: float) -> float:
        """Seconds until every front runs ``version`` (read in process: polling /readyz
        over HTTP from this busy process would time the poller, not the bus)."""
        started = time.monotonic()
        while any(config_version(f.state.config) != version for f in self.fronts):
            if time.monotonic() - started > timeout_s:
                return float("inf")
            time.sleep(0.01)
        return time.monotonic() - started


@pytest.fixture
def fronts(tmp_path: Path) -> Iterator[Fronts]:
    os.environ["TIERGATE_BUS_ADMIN_KEY"] = ADMIN_KEY
    prefix = f"tg-bus-{os.getpid()}-{time.monotonic_ns()}"
    files = [tmp_path / f"front{i}.yaml" for i in range(3)]
    handle = Fronts([], files, prefix)
    for i in range(3):
        handle.write(i, (0.3, 0.7))
    try:
        with ExitStack() as stack:
            for path in files:
                source = (lambda p: lambda: load_config(p))(path)
                handle.fronts.append(stack.enter_context(running_gateway(source(), source)))
            yield handle
    finally:
        delete_prefix(REDIS7_URL, prefix)


def test_a_reload_on_one_front_applies_on_every_front_within_a_second(fronts: Fronts) -> None:
    old = fronts.readyz(0)["config_version"]
    assert {fronts.readyz(i)["config_version"] for i in range(3)} == {old}
    for i in range(3):
        fronts.write(i, (0.2, 0.9))  # the same new file everywhere (a shared ConfigMap)
    started = time.monotonic()
    answer = fronts.reload(0)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["fronts_listening"] == 3 and body["version"] != old
    assert fronts.until_all_run(body["version"], timeout_s=5) < 5
    took = time.monotonic() - started
    assert took < 1.0, took
    for i in range(3):
        ready = fronts.readyz(i)
        assert ready["config_version"] == ready["published_version"] == body["version"]
    for front in fronts.fronts:
        assert front.state.config.routing.thresholds == (0.2, 0.9)
    print(f"reload call on 1 front to all 3 running the new version: {took * 1000:.0f} ms")


def test_a_front_whose_file_lags_catches_up_when_it_arrives(fronts: Fronts) -> None:
    fronts.write(0, (0.1, 0.8))
    fronts.write(1, (0.1, 0.8))  # front 2's volume has not been updated yet
    version = fronts.reload(0).json()["version"]
    assert fronts.until_all_run(version, timeout_s=0.8) == float("inf")
    assert fronts.readyz(2)["published_version"] == version
    fronts.write(2, (0.1, 0.8))
    assert fronts.until_all_run(version, timeout_s=3) < 3
    assert fronts.readyz(2)["config_version"] == version


def test_a_refused_file_is_not_published(fronts: Fronts) -> None:
    old = fronts.readyz(0)["config_version"]
    broken = config_at(fronts.prefix, (0.3, 0.7))
    broken["engines"]["fake-small"]["replicas"] = 3  # engines need a restart
    fronts.files[0].write_text(yaml.safe_dump(broken))
    answer = fronts.reload(0)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_policy"
    time.sleep(0.3)
    assert [fronts.readyz(i)["config_version"] for i in range(3)] == [old] * 3
    assert fronts.readyz(1)["published_version"] is None
