"""What the lifespan builds for ``/mcp`` and closes after it: the SDK server and its
session manager, the upstream connections, the catalog, the tool calls, the metrics.

Built once (``open_mcp``); a policy reload (``GatewayState.on_reload``) closes the
connections of servers it removed or changed and writes what changed to the audit log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from prometheus_client import CollectorRegistry

from gateway.mcp.calls import ToolCalls
from gateway.mcp.catalog import Catalog
from gateway.mcp.metrics import McpMetrics
from gateway.mcp.pool import Upstreams
from gateway.mcp.server import build_server
from gateway.telemetry.tracing import Tracing
from policies.mcp_spec import McpServerSpec
from policies.schema import GatewayConfig
from policies.stores.audit import AuditEntry, AuditLog, entry
from policies.stores.store import StoreUnavailable

log = logging.getLogger(__name__)
# Per-request INFO lines of the SDK's transport ("Terminating session: None" for every
# stateless POST) and of httpx2 (every upstream POST): kept for WARNING and above.
CHATTY_LOGGERS = ("mcp.server.streamable_http", "httpx2")


def _where(spec: McpServerSpec) -> str:
    """A server's address for the audit log (no credential is ever in it)."""
    if spec.url is not None:
        return f"{spec.transport} {spec.url}"
    return "command " + " ".join(spec.command or ())


class McpService:
    def __init__(
        self,
        config: GatewayConfig,
        registry: CollectorRegistry,
        tracing: Tracing,
        audit: AuditLog,
        version: str,
    ) -> None:
        self.audit = audit
        for name in CHATTY_LOGGERS:
            chatty = logging.getLogger(name)
            if chatty.getEffectiveLevel() < logging.WARNING and not log.isEnabledFor(logging.DEBUG):
                chatty.setLevel(logging.WARNING)
        self.upstreams = Upstreams()
        self.metrics = McpMetrics(registry, config.metrics.tenant_label)
        self.catalog = Catalog(self.upstreams, self.metrics)
        self.calls = ToolCalls(self.upstreams, self.metrics, tracing)
        self.server = build_server(self.catalog, self.calls, self.upstreams, version)
        sessions = config.mcp.sessions
        self.manager = StreamableHTTPSessionManager(
            self.server,
            json_response=True,  # one answer per POST (the gateway forwards no progress)
            stateless=sessions.stateless,
            max_request_body_size=sessions.max_request_bytes,
            session_idle_timeout=sessions.idle_s,
            max_sessions=sessions.max_sessions,
        )
        self.inflight = 0
        self._servers = {name: _where(s) for name, s in config.mcp.servers.items()}
        self._audits: set[asyncio.Task[None]] = set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager's task group, then every upstream closed (its processes
        stopped) when the gateway stops."""
        async with self.manager.run():
            try:
                yield
            finally:
                await self.upstreams.aclose()
                if self._audits:
                    await asyncio.wait(self._audits, timeout=5)

    def reconfigure(self, config: GatewayConfig) -> None:
        closed = self.upstreams.reconfigure(config.mcp)
        servers = {name: _where(s) for name, s in config.mcp.servers.items()}
        if servers == self._servers and not closed:
            return
        before, self._servers = self._servers, servers
        log.info("mcp servers reloaded: %s (connections closed: %s)", sorted(servers), closed)
        change = entry("policy-reload", "mcp.servers", "mcp", dict(before), dict(servers))
        task = asyncio.ensure_future(self._audit(change))
        self._audits.add(task)
        task.add_done_callback(self._audits.discard)

    async def _audit(self, change: AuditEntry) -> None:
        try:
            await self.audit.append(change)
        except StoreUnavailable as exc:
            log.warning("could not audit the mcp.servers reload: %s", exc)


def open_mcp(
    config: GatewayConfig,
    registry: CollectorRegistry,
    tracing: Tracing,
    audit: AuditLog,
    version: str,
) -> McpService:
    """Built by the lifespan from the startup policy; a reload reaches it through
    ``GatewayState.on_reload`` (``reconfigure``)."""
    return McpService(config, registry, tracing, audit, version)
