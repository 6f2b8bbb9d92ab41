"""What the MCP tests share: upstream servers started with the official SDK, the SDK's
client pointed at a gateway's ``/mcp`` with a key, and calls whose failures are kept."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from tiergate_testing.mcp_servers import stdio_server, upstream_process

__all__ = ["call", "http_upstream", "mcp_client", "stdio_server", "text_of"]


@contextmanager
def http_upstream(name: str, transport: str = "http") -> Iterator[str]:
    """The test upstream over streamable HTTP (or SSE); yields its endpoint URL."""
    with upstream_process(name, transport) as (url, _):
        yield url


@asynccontextmanager
async def mcp_client(
    base_url: str, key: str, mode: str = "auto", headers: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """The official SDK client on ``base_url/mcp`` with ``key`` as a Bearer token
    (``mode``: ``legacy`` is the initialize handshake, ``auto`` the 2026-07-28 protocol
    the gateway also speaks) and any other ``headers`` on every request."""
    sent = {"Authorization": f"Bearer {key}", **(headers or {})}
    http = httpx2.AsyncClient(headers=sent, timeout=120)
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
