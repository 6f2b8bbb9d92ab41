"""``routing.escalation`` reloads without a restart; a bad block changes nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from policies.loader import load_config
from tests.gateway.cluster.test_policy_reload import ADMIN_KEY, base_config, reload, write
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[RunningGateway, Path]]:
    os.environ["TIERGATE_RELOAD_ADMIN_KEY"] = ADMIN_KEY
    path = tmp_path / "gateway.yaml"
    write(path, base_config())
    with running_gateway(load_config(path), lambda: load_config(path)) as running:
        yield running, path


def plan_of(gateway: RunningGateway) -> Any:
    answer = httpx.post(
        gateway.base_url + "/v1/route",
        json={"messages": [{"role": "user", "content": "hello"}]},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["escalation"]


def test_escalation_reloads_and_a_bad_block_changes_nothing(
    gateway: tuple[RunningGateway, Path],
) -> None:
    running, path = gateway
    assert plan_of(running) is None
    config = base_config()
    config["routing"] = {"escalation": {"mode": "always", "threshold": -1.5}}
    write(path, config)
    assert reload(running).status_code == 200
    assert plan_of(running)["threshold"] == -1.5
    config["routing"]["escalation"]["threshold"] = 1.0  # a log-probability is never above 0
    write(path, config)
    refused = reload(running)
    assert refused.status_code == 400 and "threshold" in refused.json()["error"]["message"]
    assert plan_of(running)["threshold"] == -1.5  # the running policy stayed
