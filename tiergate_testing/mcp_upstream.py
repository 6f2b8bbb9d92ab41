"""An upstream MCP server for the tests and the benchmark, built with the official SDK's
``MCPServer``: ``python -m tiergate_testing.mcp_upstream --transport stdio`` (or ``http
--port N``, ``sse --port N``).

Tools: ``add`` and ``echo`` (plain), ``whoami`` (its process, ``pid=``, and what
credential reached it: its ``Authorization`` header over HTTP, ``$UPSTREAM_TOKEN`` over
stdio), and the faults: ``hang`` (never answers), ``die`` (the process exits mid-call),
``big`` (a result of ``mb`` megabytes). A resource ``note://readme``, a template
``greeting://{who}`` and a prompt ``review``. ``--name`` names the server.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings

README = "tiergate upstream readme: the marker is tiergate-mcp-77"


def build(name: str) -> MCPServer[Any]:
    app: MCPServer[Any] = MCPServer(name)

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @app.tool(structured_output=False)
    def echo(text: str) -> str:
        """Return the text as it came."""
        return text

    @app.tool(structured_output=False)
    def whoami(ctx: Context) -> str:
        """The credential this call reached the server with."""
        headers = ctx.headers or {}
        header = headers.get("authorization", "")
        token = os.environ.get("UPSTREAM_TOKEN", "")
        return f"{name} pid={os.getpid()} header={header} env={token}"

    @app.tool(structured_output=False)
    async def hang() -> str:
        """Never answers."""
        await anyio.sleep_forever()
        return ""

    @app.tool(structured_output=False)
    def die() -> str:
        """The server process exits while the call is in flight."""
        os._exit(3)

    @app.tool(structured_output=False)
    def big(mb: int) -> str:
        """A result of ``mb`` megabytes."""
        return "x" * (mb * 1024 * 1024)

    @app.resource("note://readme")
    def readme() -> str:
        """The upstream's readme."""
        return README

    @app.resource("greeting://{who}")
    def greeting(who: str) -> str:
        """A greeting."""
        return f"Hello, {who}!"

    @app.prompt()
    def review(code: str) -> str:
        """Ask for a code review."""
        return f"Please review: {code}"

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("stdio", "http", "sse"), default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="upstream")
    args = parser.parse_args()
    app = build(args.name)
    if args.transport == "stdio":
        app.run()
        return
    open_hosts = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    if args.transport == "sse":
        app.run("sse", host="127.0.0.1", port=args.port, transport_security=open_hosts)
    else:
        app.run("streamable-http", host="127.0.0.1", port=args.port, transport_security=open_hosts)


if __name__ == "__main__":
    main()
