"""Resource reads and prompts: the caller's allowlist (a resource needs the whole server,
``gateway.mcp.names``), the timeout and the size bound of tool calls, the upstream's URIs
back under the gateway's names. They are neither priced nor recorded per call."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from gateway.mcp.caller import Caller
from gateway.mcp.errors import from_failure, unknown
from gateway.mcp.names import resource_uri, split_name, split_uri
from gateway.mcp.pool import Upstreams
from gateway.mcp.upstream import R, Upstream, UpstreamFailure, size_of, too_large


async def read_resource(upstreams: Upstreams, caller: Caller, uri: str) -> types.ReadResourceResult:
    split = split_uri(uri)
    if split is None or split[0] not in caller.config.mcp.servers:
        raise unknown("resource", uri)
    server, inner = split
    if not caller.allowlist.allows_server(server):
        raise unknown("resource", uri)
    p = caller.principal
    upstream = upstreams.get(caller.config.mcp, server, p.tenant, p.key_id)
    request = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=inner))
    result = await _bounded(upstream, request, types.ReadResourceResult)
    contents = [c.model_copy(update={"uri": resource_uri(server, c.uri)}) for c in result.contents]
    return result.model_copy(update={"contents": contents})


async def get_prompt(
    upstreams: Upstreams, caller: Caller, params: types.GetPromptRequestParams
) -> types.GetPromptResult:
    split = split_name(params.name)
    servers = caller.config.mcp.servers
    if split is None or split[0] not in servers or not caller.allowlist.allows(params.name):
        raise unknown("prompt", params.name)
    server, name = split
    p = caller.principal
    upstream = upstreams.get(caller.config.mcp, server, p.tenant, p.key_id)
    inner = types.GetPromptRequestParams(name=name, arguments=params.arguments)
    return await _bounded(upstream, types.GetPromptRequest(params=inner), types.GetPromptResult)


async def _bounded(upstream: Upstream, request: Any, result: type[R]) -> R:
    limits = upstream.limits
    try:
        answer = await upstream.request(request, result)
    except UpstreamFailure as failure:
        raise from_failure(failure) from None
    if size_of(answer) > limits.max_result_bytes:
        raise from_failure(too_large(upstream.server, limits.max_result_bytes))
    return answer
