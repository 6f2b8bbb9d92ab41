"""Tier engine nodes as real processes (``python -m gateway serve``), for tests and bench.

A node is an ordinary gateway whose config has one tier and its engines (here the
protocol fake at a set pace), one tenant for the fronts (key from ``TIERGATE_NODE_KEY``),
no Redis and no cache: the fronts do auth, caching and budgets; a node only generates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiergate_testing.gateways import GatewayProcess, subprocess_env

NODE_KEY = "tg-node-key-0123456789abcdef"
MODEL = "fake-node-model"


def node_config(max_inflight: int = 256, **engine: Any) -> dict[str, Any]:
    options = {"tokens": 8, "max_running": 256, **engine}
    spec = {"backend": "fake", "model": MODEL, "max_inflight": max_inflight, "options": options}
    return {
        "engines": {"fake": spec},
        "tiers": {"small": {"engines": ["fake"]}},
        "prices": {MODEL: {"input": 0.1, "output": 0.2}},
        "tenants": {
            "fronts": {
                "keys": [{"id": "front", "from_env": "TIERGATE_NODE_KEY"}],
                "cache": {"enabled": False},
            }
        },
    }


def front_config(endpoints_file: Path, redis_url: str | None, prefix: str) -> dict[str, Any]:
    """One tier whose engine is the nodes listed in ``endpoints_file`` (re-read live)."""
    return {
        "redis_url": redis_url,
        "redis_prefix": prefix,
        "engines": {
            "small-nodes": {
                "backend": "openai",
                "model": MODEL,
                "options": {"api_key_env": "TIERGATE_NODE_KEY", "timeout_s": 30},
                "discover": {
                    "file": str(endpoints_file),
                    "refresh_s": 0.25,
                    "load_interval_s": 0.1,
                },
            }
        },
        "tiers": {"small": {"engines": ["small-nodes"], "pool": {"rebuild_dead": False}}},
        "prices": {MODEL: {"input": 0.1, "output": 0.2}},
        "cache": {"key_prefix": f"{prefix}:cache"},
        "tenants": {
            "acme": {
                "keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}],
                "cache": {"enabled": False},
            }
        },
    }


class NodeProcess(GatewayProcess):
    """One engine node on 127.0.0.1:<port>; ``kill()`` is SIGKILL,
    as a lost machine."""

    def __init__(self, workdir: Path, name: str, **engine: Any) -> None:
        env = subprocess_env(TIERGATE_NODE_KEY=NODE_KEY, TIERGATE_REDIS_URL="")
        super().__init__(node_config(**engine), workdir, name=name, env=env)


def write_endpoints(path: Path, nodes: list[NodeProcess]) -> None:
    """Replace the file in one step, so a reader never sees half of it."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text("".join(node.api_url + "\n" for node in nodes))
    scratch.replace(path)
