"""Tier engine nodes as real processes (``python -m gateway serve``), for tests and benches.

A node is an ordinary gateway whose config has one tier and its engines (here the
protocol fake at a set pace), one tenant for the fronts (key from ``TIERGATE_NODE_KEY``),
no Redis and no cache: the fronts do auth, caching and budgets; a node only generates.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parent.parent
NODE_KEY = "tg-node-key-0123456789abcdef"
MODEL = "fake-node-model"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


class NodeProcess:
    """One engine node on 127.0.0.1:<port>; ``kill()`` is SIGKILL, as a lost machine."""

    def __init__(self, workdir: Path, name: str, **engine: Any) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(node_config(**engine)))
        self.log_path = workdir / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, TIERGATE_NODE_KEY=NODE_KEY, TIERGATE_REDIS_URL="")
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        command = [sys.executable, "-m", "gateway", "serve", "--config", str(self.config_path)]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=REPO)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"node {self.name} exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url.removesuffix("/v1") + "/readyz", timeout=1).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"node {self.name} not ready")

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(10)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def write_endpoints(path: Path, nodes: list[NodeProcess]) -> None:
    """Replace the file in one step, so a reader never sees half of it."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text("".join(node.url + "\n" for node in nodes))
    scratch.replace(path)
