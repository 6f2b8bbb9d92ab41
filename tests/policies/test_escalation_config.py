"""``routing.escalation`` in the config: validated once, with the engines' log-probabilities."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.loader import ConfigError, parse_config
from policies.schema import GatewayConfig
from tests.support import PYTHON, REPO
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import subprocess_env


def dump(raw: dict[str, Any]) -> str:
    return yaml.safe_dump(raw, sort_keys=False)  # tiers in file order: cheapest first


def with_escalation(**escalation: Any) -> dict[str, Any]:
    raw = fake_config()
    raw["routing"] = {"escalation": {"mode": "unsure", **escalation}}
    return raw


def test_defaults_and_the_tenant_override() -> None:
    raw = with_escalation()
    raw["tenants"]["globex"]["escalation"] = {"mode": "off"}
    config = GatewayConfig.model_validate(raw)
    spec = config.tenants["acme"].escalation_of(config.routing)
    assert spec is not None and (spec.margin, spec.signal, spec.quantile) == (0.1, "quantile", 0.1)
    assert spec.threshold == -2.5
    assert config.tenants["globex"].escalation_of(config.routing) is None


def remote_small(raw: dict[str, Any], **engine: Any) -> dict[str, Any]:
    raw["engines"]["fake-small"] = {
        "backend": "openai",
        "model": "fake-small",
        "options": {"api_base": "http://127.0.0.1:9/v1"},
        **engine,
    }
    return raw


def test_a_first_tier_without_logprobs_is_a_config_error() -> None:
    text = dump(remote_small(with_escalation()))
    with pytest.raises(ConfigError) as info:
        parse_config(text, "esc.yaml")
    message = str(info.value)
    assert "routing.escalation: tier 'small' may answer first" in message
    assert "engine 'fake-small' (backend 'openai') returns no token log-probabilities" in message
    # the server behind it returns them: the engine says so
    parse_config(dump(remote_small(with_escalation(), logprobs=True)), "esc.yaml")
    # the dearest tier never answers first: it needs none
    raw = with_escalation()
    raw["engines"]["fake-large"] = {
        "backend": "openai",
        "model": "fake-large",
        "options": {"api_base": "http://127.0.0.1:9/v1"},
    }
    parse_config(dump(raw), "esc.yaml")


def test_a_tenant_block_is_checked_too_and_logprobs_is_for_forwarders_only() -> None:
    raw = remote_small(fake_config())
    raw["tenants"]["acme"]["escalation"] = {"mode": "always"}
    with pytest.raises(ConfigError, match=r"tenants\.acme\.escalation: tier 'small'"):
        parse_config(dump(raw), "esc.yaml")
    raw = fake_config()
    raw["engines"]["fake-small"]["logprobs"] = False
    with pytest.raises(ConfigError, match="logprobs is declared by backend 'fake' itself"):
        parse_config(dump(raw), "esc.yaml")


@pytest.mark.parametrize(
    ("field", "value"),
    [("mode", "sometimes"), ("margin", 2), ("threshold", 0.5), ("signal", "median")],
)
def test_bad_values_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(dump(with_escalation(**{field: value})), "esc.yaml")
    assert any(p.field == f"routing.escalation.{field}" for p in info.value.problems)


def test_check_config_names_the_engine(tmp_path: Path) -> None:
    bad = tmp_path / "esc.yaml"
    bad.write_text(dump(remote_small(with_escalation())))
    run = subprocess.run(
        [PYTHON, "-m", "gateway", "check-config", str(bad)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 1 and "returns no token log-probabilities" in run.stderr
