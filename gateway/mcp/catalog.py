"""What a caller sees: the upstreams' listings under the gateway's names, only what its
allowlist lets it use.

Each upstream the caller may reach is listed over the caller's own connection to it (its
credential may show it other tools than another tenant's would), all at once; an
upstream that fails or is slow (``connect_timeout_s``) is left out of this answer and
counted, the others are still listed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import mcp_types as types

from gateway.mcp.caller import Caller
from gateway.mcp.metrics import McpMetrics
from gateway.mcp.names import resource_uri, tool_name
from gateway.mcp.pool import Upstreams
from gateway.mcp.upstream import UpstreamFailure

log = logging.getLogger(__name__)


class Catalog:
    def __init__(self, upstreams: Upstreams, metrics: McpMetrics) -> None:
        self.upstreams, self.metrics = upstreams, metrics

    async def _listings(
        self, caller: Caller, kind: str, servers: list[str]
    ) -> list[tuple[str, list[Any]]]:
        mcp, principal = caller.config.mcp, caller.principal

        async def one(server: str) -> list[Any]:
            upstream = self.upstreams.get(mcp, server, principal.tenant, principal.key_id)
            try:
                return await upstream.listing(kind)
            except UpstreamFailure as exc:
                log.warning("mcp upstream %s: %s listing left out: %s", server, kind, exc)
                self.metrics.listing_failures.labels(server).inc()
                return []

        found = await asyncio.gather(*(one(s) for s in servers))
        return list(zip(servers, found, strict=True))

    def _reachable(self, caller: Caller, whole: bool) -> list[str]:
        allow = caller.allowlist
        check: Callable[[str], bool] = allow.allows_server if whole else allow.may_reach
        return [s for s in caller.config.mcp.servers if check(s)]

    async def tools(self, caller: Caller) -> list[types.Tool]:
        return await self._named(caller, "tools")

    async def prompts(self, caller: Caller) -> list[types.Prompt]:
        return await self._named(caller, "prompts")

    async def _named(self, caller: Caller, kind: str) -> list[Any]:
        out: list[Any] = []
        for server, items in await self._listings(caller, kind, self._reachable(caller, False)):
            for item in items:
                full = tool_name(server, item.name)
                if caller.allowlist.allows(full):
                    out.append(item.model_copy(update={"name": full}))
        return out

    async def resources(self, caller: Caller) -> list[types.Resource]:
        out: list[types.Resource] = []
        servers = self._reachable(caller, True)
        for server, items in await self._listings(caller, "resources", servers):
            out.extend(r.model_copy(update={"uri": resource_uri(server, r.uri)}) for r in items)
        return out

    async def templates(self, caller: Caller) -> list[types.ResourceTemplate]:
        out: list[types.ResourceTemplate] = []
        servers = self._reachable(caller, True)
        for server, items in await self._listings(caller, "templates", servers):
            out.extend(
                t.model_copy(update={"uri_template": resource_uri(server, t.uri_template)})
                for t in items
            )
        return out
