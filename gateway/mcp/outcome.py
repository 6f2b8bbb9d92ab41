"""What one MCP tool call came to, computed once when it ends: the ledger event, the
settlement (``gateway.money.hold``), the metrics and the trace are all written from it.

A tool call's status: ``ok``; ``tool_error`` (the tool ran and said it failed:
``isError``); ``error`` (the upstream answered with a JSON-RPC error); ``timeout``,
``closed`` (the upstream ended mid-call), ``down``, ``too_large``; ``cancelled`` (the
client went away). It is charged its price when the upstream answered it (``ok``,
``tool_error``, ``error``), nothing otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from backends.base import Usage
from policies.schema import GatewayConfig
from policies.stores.ledger import SpendEvent, now
from policies.tenants import Principal

TIER = "mcp"  # the ledger's tier label of tool calls
ANSWERED = frozenset({"ok", "tool_error", "error"})
NO_USAGE = Usage(0, 0)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The call as admission and settlement read it (``gateway.money.hold.Admitted``)."""

    config: GatewayConfig
    request_id: str
    principal: Principal
    metadata: Mapping[str, str] | None  # the linked model call, when the client names it


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    server: str
    tool: str
    status: str
    denied: str | None = None  # rate_limit | budget | None (a store down: refused)
    cost_usd: float = 0.0
    latency_s: float = 0.0
    result_bytes: int = 0
    arguments: str | None = None  # JSON, where the tenant logs arguments
    usage: Usage = NO_USAGE  # tool calls use no tokens

    @property
    def rate_tokens(self) -> int:
        return self.usage.total_tokens

    @property
    def name(self) -> str:
        return f"{self.server}.{self.tool}"

    def ledger_event(
        self,
        request_id: str,
        principal: Principal,
        downgraded: bool,
        metadata: Mapping[str, str] | None = None,
    ) -> SpendEvent:
        latency_ms = self.latency_s * 1000
        return SpendEvent(
            ts=now(),
            request_id=request_id,
            tenant=principal.tenant,
            key_id=principal.key_id,
            tier=TIER,
            model=self.name,
            kind="tool_call",
            status=self.status,
            cost_usd=self.cost_usd,
            cache="bypass",
            latency_ms=latency_ms,
            ttft_ms=latency_ms,
            metadata=metadata,
            server=self.server,
            tool=self.tool,
            result_bytes=self.result_bytes,
            arguments=self.arguments,
        )

    def denial_event(
        self, request_id: str, principal: Principal, metadata: Mapping[str, str] | None = None
    ) -> SpendEvent:
        return SpendEvent(
            ts=now(),
            request_id=request_id,
            tenant=principal.tenant,
            key_id=principal.key_id,
            tier=TIER,
            model=self.name,
            kind="denied",
            status=self.denied or "refused",
            metadata=metadata,
            server=self.server,
            tool=self.tool,
        )
