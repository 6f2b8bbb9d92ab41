"""Process settings from the environment (``TIERGATE_*``); the YAML holds the policy."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

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
