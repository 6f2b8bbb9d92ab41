"""Every live upstream connection, one per server and credential.

A caller's connection to a server is the one opened with the most specific credential the
policy gives it (its key's, its tenant's, the server's: ``McpServerSpec.credential_for``),
so a credential only ever carries the calls of those it was configured for. A request
asks with its own policy snapshot: a connection opened under another version of the
server's entry (a reload changed it) is replaced, and ``reconfigure`` closes at once the
connections of servers a reload removed or changed.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.mcp.upstream import Limits, Upstream
from policies.mcp_spec import McpConfig

log = logging.getLogger(__name__)


class Upstreams:
    def __init__(self) -> None:
        self._live: dict[tuple[str, str], Upstream] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, mcp: McpConfig, server: str, tenant: str, key_id: str) -> Upstream:
        """The connection for this caller (``server`` must be in ``mcp.servers``)."""
        spec = mcp.servers[server]
        credential_id, credential = spec.credential_for(tenant, key_id)
        key = (server, credential_id)
        limits = Limits.of(mcp, spec)
        live = self._live.get(key)
        if live is not None and live.spec == spec and live.limits == limits:
            return live
        if live is not None:
            self._retire(live)
        fresh = Upstream(server, spec, credential, limits)
        self._live[key] = fresh
        return fresh

    def reconfigure(self, mcp: McpConfig) -> list[str]:
        """Close the connections whose server a new policy removed or changed; returns
        those servers."""
        changed: set[str] = set()
        for key, upstream in list(self._live.items()):
            spec = mcp.servers.get(upstream.server)
            if spec != upstream.spec:
                del self._live[key]
                self._retire(upstream)
                changed.add(upstream.server)
        return sorted(changed)

    def _retire(self, upstream: Upstream) -> None:
        task = asyncio.ensure_future(upstream.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def connections(self) -> dict[str, int]:
        """Open connections per server (for ``/readyz`` and the metrics)."""
        counts: dict[str, int] = {}
        for server, _ in self._live:
            counts[server] = counts.get(server, 0) + 1
        return counts

    async def aclose(self) -> None:
        live, self._live = list(self._live.values()), {}
        await asyncio.gather(*(u.aclose() for u in live), *self._closing, return_exceptions=True)
