"""The gateway as an MCP server: the SDK's low-level ``Server`` with one handler per
method, each reading its caller off the HTTP request and answering with the SDK's types.

The SDK does the protocol: both eras (the ``initialize`` handshake of 2024-11-05 to
2025-11-25, and the per-request envelope of 2026-07-28), parsing, validation, the
results' shape for the client's version, JSON-RPC errors for what a handler raises as
``MCPError``. Listings are one page: the gateway gathers every upstream page itself.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.mcp.caller import caller_of
from gateway.mcp.calls import ToolCalls
from gateway.mcp.catalog import Catalog
from gateway.mcp.pool import Upstreams
from gateway.mcp.reads import get_prompt, read_resource

Ctx = ServerRequestContext[Any, Any]
INSTRUCTIONS = (
    "tiergate: the tools, prompts and resources of the upstream MCP servers your key may "
    "use, named SERVER.NAME (resources SERVER+URI)."
)


def _unchecked(name: str) -> None:
    return None


def build_server(
    catalog: Catalog, calls: ToolCalls, upstreams: Upstreams, version: str
) -> Server[Any]:
    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=await catalog.tools(caller_of(ctx)))

    async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        meta = (ctx.params or {}).get("_meta")
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        caller = caller_of(ctx)
        return await calls.call(caller, params, meta if isinstance(meta, dict) else None, modern)

    async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListPromptsResult(prompts=await catalog.prompts(caller_of(ctx)))

    async def prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> Any:
        return await get_prompt(upstreams, caller_of(ctx), params)

    async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListResourcesResult(resources=await catalog.resources(caller_of(ctx)))

    async def list_templates(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        found = await catalog.templates(caller_of(ctx))
        return types.ListResourceTemplatesResult(resource_templates=found)

    async def read(ctx: Ctx, params: types.ReadResourceRequestParams) -> Any:
        return await read_resource(upstreams, caller_of(ctx), params.uri)

    return Server(
        "tiergate",
        version=version,
        instructions=INSTRUCTIONS,
        # The SDK would check a 2026 call's Mcp-Param-* headers against the tool's schema
        # by running tools/list on every call; the handler checks them against the
        # caller's own (cached) listing instead (``ToolCalls.call``).
        get_tool_input_schema=_unchecked,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=prompt,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read,
    )
