"""Who is calling ``/mcp``: resolved once per HTTP request by ``gateway.mcp.endpoint``,
read by the SDK server's handlers from the request the SDK hands them.

A tool call is linked to the model call that asked for it when the client says which:
the W3C ``traceparent`` header (or ``_meta.traceparent`` on the MCP request, as the MCP
SDKs propagate it) makes the tool call's span a child in that trace, and the
``x-tiergate-model-request-id`` header (the model call's ``x-request-id``) is kept on the
span and in the tool call's ledger event (``metadata.model_request_id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from opentelemetry.context import Context
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.core.serving_core import ServingCore
from gateway.mcp.names import Allowlist
from policies.schema import GatewayConfig
from policies.tenants import Principal

SCOPE_KEY = "tiergate.mcp.caller"
MODEL_REQUEST_HEADER = "x-tiergate-model-request-id"
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True, slots=True)
class Caller:
    principal: Principal
    core: ServingCore  # the policy snapshot taken with the key, for the whole request
    allowlist: Allowlist
    headers: Mapping[str, str]  # of the HTTP request (for trace context)
    model_request_id: str | None = None

    @property
    def config(self) -> GatewayConfig:
        return self.core.config

    @property
    def metadata(self) -> Mapping[str, str] | None:
        if self.model_request_id is None:
            return None
        return {"model_request_id": self.model_request_id}


def allowlist_of(principal: Principal) -> Allowlist:
    return Allowlist(principal.policy.mcp_tools, principal.mcp_tools)


def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
    """The caller the endpoint put on this HTTP request (every MCP request has one)."""
    request = ctx.request
    caller = None if request is None else request.scope.get(SCOPE_KEY)
    if not isinstance(caller, Caller):
        raise MCPError(INTERNAL_ERROR, "the request carries no caller")
    return caller


def _valid(context: Context) -> Context | None:
    return context if get_current_span(context).get_span_context().is_valid else None


def trace_parent(caller: Caller, meta: Mapping[str, Any] | None) -> Context | None:
    """The trace a tool call joins: ``_meta.traceparent`` first, else the header's."""
    if meta and isinstance(meta.get("traceparent"), str):
        found = _valid(_PROPAGATOR.extract({"traceparent": meta["traceparent"]}))
        if found is not None:
            return found
    if "traceparent" in caller.headers:
        return _valid(_PROPAGATOR.extract(caller.headers))
    return None
