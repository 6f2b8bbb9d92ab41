"""Policies reload without a restart; a bad file leaves the running policy in place."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from policies.loader import load_config
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import (
    GatewayProcess,
    RunningGateway,
    running_gateway,
    subprocess_env,
)

ADMIN_KEY = "tg-admin-key-for-reload-tests"
NEW_KEY = "tg-new-tenant-key-0001"


def write(path: Path, config: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(config))


def base_config() -> dict[str, Any]:
    config = fake_config()
    config["admin"] = {"key_from_env": "TIERGATE_RELOAD_ADMIN_KEY"}
    return config


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[RunningGateway, Path]]:
    os.environ["TIERGATE_RELOAD_ADMIN_KEY"] = ADMIN_KEY
    path = tmp_path / "gateway.yaml"
    write(path, base_config())
    with running_gateway(load_config(path), lambda: load_config(path)) as running:
        yield running, path


def tier_of(gateway: RunningGateway | GatewayProcess, key: str = TEST_KEY) -> str:
    answer = httpx.post(
        gateway.base_url + "/v1/route",
        json={"messages": [{"role": "user", "content": "hello"}]},
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    tier: str = answer.json()["tier"]
    return tier


def reload(gateway: RunningGateway, key: str | None = ADMIN_KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(gateway.base_url + "/admin/api/policies/reload", headers=headers, timeout=10)


def test_good_file_applies_and_broken_file_changes_nothing(
    gateway: tuple[RunningGateway, Path],
) -> None:
    running, path = gateway
    assert tier_of(running) == "small"
    config = base_config()
    config["tenants"]["acme"]["default_tier"] = "medium"
    config["tenants"]["newco"] = {"keys": [{"id": "n1", "from_env": "TIERGATE_RELOAD_NEW"}]}
    os.environ["TIERGATE_RELOAD_NEW"] = NEW_KEY
    write(path, config)
    done = reload(running)
    assert done.status_code == 200, done.text
    assert done.json()["tenants"] == 3
    assert tier_of(running) == "medium"
    assert tier_of(running, NEW_KEY) == "small"  # the new tenant's key works at once

    broken = base_config()
    broken["tenants"]["acme"]["default_tier"] = "large"
    broken["tenants"]["acme"]["allowed_tiers"] = ["nonexistent"]
    write(path, broken)
    refused = reload(running)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_policy"
    assert "nonexistent" in error["message"]
    assert tier_of(running) == "medium"  # not half-applied: default_tier did not move
    assert tier_of(running, NEW_KEY) == "small"

    path.write_text("tenants: [unclosed\n")
    assert reload(running).status_code == 400
    assert tier_of(running) == "medium"


def test_changes_that_need_a_restart_are_refused(gateway: tuple[RunningGateway, Path]) -> None:
    running, path = gateway
    config = base_config()
    config["engines"]["fake-small"]["replicas"] = 3
    config["tenants"]["acme"]["default_tier"] = "large"
    write(path, config)
    refused = reload(running)
    assert refused.status_code == 400
    assert "engines" in refused.json()["error"]["message"]
    assert tier_of(running) == "small"


def test_reload_needs_the_admin_key(gateway: tuple[RunningGateway, Path]) -> None:
    running, _ = gateway
    assert reload(running, TEST_KEY).status_code == 403
    assert reload(running, None).status_code == 401


@pytest.mark.slow
def test_sighup_reloads_a_served_gateway(tmp_path: Path) -> None:
    config = base_config()
    env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_LOG_LEVEL="warning")
    with GatewayProcess(config, tmp_path, env=env, ready_path="/healthz") as served:
        assert served.config_path is not None
        path = served.config_path
        assert tier_of(served) == "small"
        config["tenants"]["acme"]["default_tier"] = "large"
        write(path, config)
        served.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while tier_of(served) != "large":
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.1)
        path.write_text("engines: {}\n")  # invalid: the running policy must stay
        served.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert not served.exited()
        assert tier_of(served) == "large"
