"""Upstream MCP servers for the tests and the benchmark: entries for ``mcp.servers`` that
run ``tiergate_testing.mcp_upstream`` over stdio, and the same server over streamable
HTTP (or SSE) as a process of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tiergate_testing.gateways import REPO, subprocess_env
from tiergate_testing.net import free_port, wait_http

UPSTREAM = (sys.executable, "-m", "tiergate_testing.mcp_upstream")


def stdio_server(name: str, **extra: Any) -> dict[str, Any]:
    """An ``mcp.servers`` entry that runs the test upstream over stdio."""
    return {"command": [*UPSTREAM, "--name", name], "cwd": str(REPO), **extra}


@contextmanager
def upstream_process(
    name: str, transport: str = "http", prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test upstream over streamable HTTP (or SSE): its endpoint URL and process
    (``prefix``: argv before Python, e.g. ``taskset -c 1``)."""
    port = free_port()
    argv = [*prefix, *UPSTREAM, "--transport", transport, "--port", str(port), "--name", name]
    process = subprocess.Popen(
        argv, cwd=REPO, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/", timeout_s=60)
        path = "sse" if transport == "sse" else "mcp"
        yield f"http://127.0.0.1:{port}/{path}", process
    finally:
        process.terminate()
        process.wait(10)
