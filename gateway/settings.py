"""Process settings from the environment (``TIERGATE_*``); the YAML holds the policy."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from policies.loader import load_config
from policies.schema import GatewayConfig

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "gateway.yaml"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TIERGATE_", frozen=True)

    config: Path = DEFAULT_CONFIG
    host: str | None = None
    port: int | None = None
    redis_url: str | None = None
    redis_cluster: bool | None = None
    log_level: str = "info"
    # Where Chart.js lives when not installed next to the dashboard (pip-installed gateway).
    chartjs_path: Path | None = None


@lru_cache
def get_settings() -> Settings:
    return Settings()


def load_effective_config(path: Path | None) -> GatewayConfig:
    """The YAML file, then ``TIERGATE_*`` environment overrides on top."""
    settings = get_settings()
    config = load_config(path or settings.config)
    updates: dict[str, object] = {}
    if settings.redis_url is not None:
        updates["redis_url"] = settings.redis_url or None
    if settings.redis_cluster is not None:
        updates["redis_cluster"] = settings.redis_cluster
    server: dict[str, object] = {}
    if settings.host is not None:
        server["host"] = settings.host
    if settings.port is not None:
        server["port"] = settings.port
    if server:
        updates["server"] = config.server.model_copy(update=server)
    return config.model_copy(update=updates) if updates else config
