"""What the MCP tests share: upstream servers started with the official SDK, the SDK's
client pointed at a gateway's ``/mcp`` with a key, and calls whose failures are kept."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from tiergate_testing.gateways import REPO, subprocess_env
from tiergate_testing.net import free_port, wait_http

UPSTREAM = [sys.executable, "-m", "tiergate_testing.mcp_upstream"]


def stdio_server(name: str, **extra: Any) -> dict[str, Any]:
    """An ``mcp.servers`` entry that runs the test upstream over stdio."""
    return {"command": [*UPSTREAM, "--name", name], "cwd": str(REPO), **extra}


@contextmanager
def http_upstream(name: str, transport: str = "http") -> Iterator[str]:
    """The test upstream over streamable HTTP (or SSE); yields its endpoint URL."""
    port = free_port()
    argv = [*UPSTREAM, "--transport", transport, "--port", str(port), "--name", name]
    process = subprocess.Popen(
        argv, cwd=REPO, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/", timeout_s=60)
        yield f"http://127.0.0.1:{port}/" + ("sse" if transport == "sse" else "mcp")
    finally:
        process.terminate()
        process.wait(10)


@asynccontextmanager
async def mcp_client(base_url: str, key: str, mode: str = "auto") -> AsyncIterator[Client]:
    """The official SDK client on ``base_url/mcp`` with ``key`` as a Bearer token
    (``mode``: ``legacy`` is the initialize handshake, ``auto`` the 2026-07-28 protocol
    the gateway also speaks)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)
    async with (
        http,
        Client(
            streamable_http_client(f"{base_url}/mcp", http_client=http), mode=mode, cache=None
        ) as client,
    ):
        yield client


async def call(client: Client, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """The tool's result, or the ``MCPError`` the call raised."""
    try:
        result: CallToolResult = await client.session.call_tool(name, arguments or {})
    except MCPError as exc:
        return exc
    return result


def text_of(result: Any) -> str:
    assert isinstance(result, CallToolResult), result
    return "".join(getattr(block, "text", "") for block in result.content)
