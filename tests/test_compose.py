"""No Docker engine runs here, so the compose file is checked as data."""

from __future__ import annotations

import yaml

from tests.support import REPO


def test_compose_has_gateway_and_persistent_redis() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) >= {"gateway", "redis"}
    redis, gateway = services["redis"], services["gateway"]
    assert redis["image"].startswith("redis:8")
    assert "--appendonly" in redis["command"] and "yes" in redis["command"]
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert redis["volumes"][0].split(":")[0] in compose["volumes"]
    assert "8000:8000" in gateway["ports"]
    assert gateway["depends_on"]["redis"]["condition"] == "service_healthy"
    assert gateway["environment"]["TIERGATE_REDIS_URL"].startswith("redis://redis:")
    for service in (redis, gateway):
        check = service["healthcheck"]
        assert check["test"][0] == "CMD" and check["retries"] > 0
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])
