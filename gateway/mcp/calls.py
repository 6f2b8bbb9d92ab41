"""One MCP tool call under the caller's governance, end to end.

    allowlist ─▶ the server's listing ─▶ tool-call rate limit ─▶ Hold (the tool's price,
    the model calls' budgets) ─▶ the upstream, within the timeout ─▶ the size bound
    ─▶ ONE ToolOutcome ─▶ settlement and ledger event, metrics, span

A name the server does not list is ``-32602 Unknown tool`` before anything is held or
sent. A refusal at any later step is a JSON-RPC error (``gateway.mcp.errors``) and is
recorded as a denial; nothing stays held. A free tool (no price) takes no reservation:
its event goes to the ledger directly. (Resource reads and prompts: ``gateway.mcp.reads``.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from time import perf_counter
from typing import Any

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import validate_mcp_param_headers
from opentelemetry import context as otel_context
from opentelemetry.trace import (
    INVALID_SPAN,
    Span,
    SpanKind,
    Status,
    StatusCode,
    set_span_in_context,
)

from gateway.errors import ApiError, RateLimited, ServiceUnavailable
from gateway.guardrails.policy import policy_for
from gateway.guardrails.values import guard_value
from gateway.mcp.caller import Caller, trace_parent
from gateway.mcp.errors import from_failure, from_refusal, unknown
from gateway.mcp.metrics import McpMetrics
from gateway.mcp.names import split_name
from gateway.mcp.outcome import ANSWERED, TIER, ToolCall, ToolOutcome
from gateway.mcp.pool import Upstreams
from gateway.mcp.upstream import Upstream, UpstreamFailure, size_of, too_large
from gateway.money.hold import Hold, Money, refusal
from gateway.money.spend import WorstCase
from gateway.telemetry.tracing import Tracing
from gateway.types import IdShape
from policies.schema import RateLimitSpec
from policies.stores.budget import key_scope, tenant_scope
from policies.stores.ledger import SpendEvent
from policies.stores.ratelimit import RateScope
from policies.stores.store import StoreUnavailable
from policies.tenants import Principal

log = logging.getLogger(__name__)

CALL_IDS = IdShape("mcp-")
MAX_LOGGED_ARGUMENTS = 4096  # bytes of a call's arguments the ledger keeps, at most


def tool_rate_scopes(principal: Principal) -> list[RateScope]:
    """The caller's tool-call windows: its tenant's and its key's, apart from the model
    calls' (``mcp:`` names)."""
    scopes: list[RateScope] = []
    limits = (
        (tenant_scope(principal.tenant), principal.policy.mcp_rate_limit),
        (key_scope(principal.tenant, principal.key_id), principal.mcp_rate_limit),
    )
    for name, limit in limits:
        if limit is not None:
            spec = RateLimitSpec(requests_per_minute=limit.calls_per_minute)
            scopes.append(RateScope(f"mcp:{name}", spec))
    return scopes


async def check_tool_rate(money: Money, call: ToolCall) -> None:
    """Raises ``RateLimited`` past a limit, ``ServiceUnavailable`` when the store is down
    (unless the tenant's rate limits fail open)."""
    scopes = tool_rate_scopes(call.principal)
    if not scopes:
        return
    try:
        decision = await money.limiter.acquire(call.request_id, scopes, 0)
    except StoreUnavailable as exc:
        if call.principal.policy.rate_limit_fail_open:
            return
        raise ServiceUnavailable(
            "the rate-limit store is unreachable; try again shortly",
            code="rate_limit_unavailable",
            headers={"Retry-After": "2"},
        ) from exc
    if not decision.allowed:
        raise RateLimited(
            f"Tool call rate limit reached for {decision.refused_by}; retry after "
            f"{decision.retry_after_s:.1f}s.",
            headers=decision.headers(),
        )


def budget_principal(principal: Principal) -> Principal:
    """The caller as its tool call's hold sees it: the budgets, not the model calls' rate
    limits (tool calls have their own, checked before)."""
    if principal.policy.rate_limit is None and principal.key_rate_limit is None:
        return principal
    policy = principal.policy.model_copy(update={"rate_limit": None})
    return replace(principal, policy=policy, key_rate_limit=None)


class ToolCalls:
    def __init__(self, upstreams: Upstreams, metrics: McpMetrics, tracing: Tracing) -> None:
        self.upstreams, self.metrics, self.tracing = upstreams, metrics, tracing

    def _upstream(self, caller: Caller, server: str) -> Upstream:
        p = caller.principal
        return self.upstreams.get(caller.config.mcp, server, p.tenant, p.key_id)

    async def call(
        self,
        caller: Caller,
        params: types.CallToolRequestParams,
        meta: Mapping[str, Any] | None,
        modern: bool = False,
    ) -> types.CallToolResult:
        """``modern``: a 2026-07-28 request, whose ``Mcp-Param-*`` headers must agree
        with its arguments for the tool's annotated parameters."""
        split = split_name(params.name)
        servers = caller.config.mcp.servers
        if split is None or split[0] not in servers or not caller.allowlist.allows(params.name):
            raise unknown("tool", params.name)
        server, tool = split
        listed = await self._listed(caller, server, tool)
        if listed is None:  # never forwarded, never priced
            raise unknown("tool", params.name)
        if modern:
            rejection = validate_mcp_param_headers(
                listed.input_schema, params.arguments or {}, caller.headers
            )
            if rejection is not None:
                raise MCPError(rejection.code, rejection.message, rejection.data)
        params = _guarded_arguments(caller, params)
        call = ToolCall(caller.config, CALL_IDS.new(), caller.principal, caller.metadata)
        span = self._span(caller, params.name, call.request_id, meta)
        token = otel_context.attach(set_span_in_context(span))  # the upstream joins the trace
        outcome = ToolOutcome(server, tool, "cancelled")
        try:
            outcome, result = await self._run(caller, call, server, tool, params)
        finally:
            otel_context.detach(token)
            self._finish_span(span, outcome)
            self.metrics.record(caller.principal.tenant, outcome)
        if isinstance(result, Exception):
            raise result
        return _guarded_result(caller, result)

    async def _listed(self, caller: Caller, server: str, tool: str) -> types.Tool | None:
        """The tool exactly as the server lists it to this caller (its listing is kept
        ``catalog_ttl_s``, dropped when the server says it changed), or None: a name the
        server does not list (``calc.*``, a homoglyph, a trailing space or NUL) is unknown."""
        try:
            listed = await self._upstream(caller, server).listing("tools")
        except UpstreamFailure as failure:
            raise from_failure(failure) from None
        return next((t for t in listed if t.name == tool), None)

    async def _run(
        self,
        caller: Caller,
        call: ToolCall,
        server: str,
        tool: str,
        params: types.CallToolRequestParams,
    ) -> tuple[ToolOutcome, types.CallToolResult | Exception]:
        money = caller.core.parts.money
        spec = caller.config.mcp.servers[server]
        price = spec.price_of(tool)
        arguments = self._logged(caller, params.arguments)
        hold = None
        if price > 0:
            held = replace(call, principal=budget_principal(call.principal))
            hold = Hold(money, call.config, held, [WorstCase(TIER, price, 0, 0)], 0)
        started = perf_counter()
        try:
            await check_tool_rate(money, call)
            if hold is not None:
                await hold.open()
        except ApiError as exc:
            denied = refusal(exc)[1]
            status = "denied" if denied else "refused"
            refused = ToolOutcome(server, tool, status, denied=denied or "refused")
            await self._settle(money, call, hold, refused)
            return refused, from_refusal(exc)
        outcome = ToolOutcome(server, tool, "cancelled", arguments=arguments)
        answer: types.CallToolResult | Exception | None = None
        try:
            got = await self._upstream_call(caller, server, tool, params)
            if isinstance(got, UpstreamFailure):
                outcome, answer = replace(outcome, status=got.status), from_failure(got)
            else:
                result, size = got
                status = "tool_error" if result.is_error else "ok"
                outcome, answer = replace(outcome, status=status, result_bytes=size), result
        finally:  # a cancelled call (the client went away) is settled too
            cost = price if outcome.status in ANSWERED else 0.0
            outcome = replace(outcome, cost_usd=cost, latency_s=perf_counter() - started)
            await self._settle(money, call, hold, outcome)
        return outcome, answer

    async def _upstream_call(
        self, caller: Caller, server: str, tool: str, params: types.CallToolRequestParams
    ) -> tuple[types.CallToolResult, int] | UpstreamFailure:
        """The upstream's result and its size, or why there is none."""
        upstream = self._upstream(caller, server)
        limits = upstream.limits
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=params.arguments)
        )
        try:
            result = await upstream.request(request, types.CallToolResult)
        except UpstreamFailure as failure:
            return failure
        size = size_of(result)
        if size > limits.max_result_bytes:
            return too_large(server, limits.max_result_bytes)
        return result, size

    def _logged(self, caller: Caller, arguments: Mapping[str, Any] | None) -> str | None:
        if not caller.principal.policy.mcp_log_arguments:
            return None
        text = orjson.dumps(arguments or {}).decode()
        return text if len(text) <= MAX_LOGGED_ARGUMENTS else text[:MAX_LOGGED_ARGUMENTS] + "…"

    async def _settle(
        self, money: Money, call: ToolCall, hold: Hold | None, outcome: ToolOutcome
    ) -> None:
        """Through the hold when there is one (it records a refusal too), else straight to
        the ledger, in a task of its own (a cancelled call is still recorded)."""
        if hold is not None:
            await hold.close(outcome)
            return
        if outcome.denied is not None:
            event = outcome.denial_event(call.request_id, call.principal, call.metadata)
        else:
            event = outcome.ledger_event(call.request_id, call.principal, False, call.metadata)
        task = asyncio.ensure_future(_record(money, event))
        money.background.add(task)
        task.add_done_callback(money.background.discard)

    def _span(
        self, caller: Caller, name: str, request_id: str, meta: Mapping[str, Any] | None
    ) -> Span:
        tracer = self.tracing.tracer
        if tracer is None:
            return INVALID_SPAN
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "tiergate.request_id": request_id,
            "tiergate.tenant": caller.principal.tenant,
            "tiergate.key_id": caller.principal.key_id,
        }
        if caller.model_request_id is not None:
            attributes["tiergate.model_request_id"] = caller.model_request_id
        parent = trace_parent(caller, meta)
        return tracer.start_span(f"execute_tool {name}", parent, SpanKind.SERVER, attributes)

    def _finish_span(self, span: Span, outcome: ToolOutcome) -> None:
        span.set_attributes(
            {
                "tiergate.tool.status": outcome.status,
                "tiergate.cost_usd": outcome.cost_usd,
                "tiergate.tool.result_bytes": outcome.result_bytes,
            }
        )
        if outcome.status not in ("ok", "tool_error"):
            span.set_status(Status(StatusCode.ERROR, outcome.status))
            span.set_attribute("error.type", outcome.denied or outcome.status)
        span.end()


def _guarded_arguments(
    caller: Caller, params: types.CallToolRequestParams
) -> types.CallToolRequestParams:
    """The arguments as the caller's ``guardrails:`` leaves them, before the upstream (or
    the ledger, ``mcp_log_arguments``) sees them; a ``block`` or ``local`` value refuses
    the call (an MCP server is not an in-process tier)."""
    if not params.arguments:
        return params
    metrics = caller.core.parts.metrics
    try:
        arguments = guard_value(
            caller.principal, dict(params.arguments), "arguments", remote=True, metrics=metrics
        )
    except ApiError as exc:
        raise from_refusal(exc) from None
    return params.model_copy(update={"arguments": arguments})


def _guarded_result(caller: Caller, result: types.CallToolResult) -> types.CallToolResult:
    """The tool's result redacted by the same policy before the client (its model) sees it."""
    if policy_for(caller.principal) is None:
        return result
    dumped = result.model_dump(by_alias=True, exclude_none=True)
    metrics = caller.core.parts.metrics
    try:
        guarded = guard_value(
            caller.principal, dumped, "result", remote=False, metrics=metrics, side="answer"
        )
    except ApiError as exc:
        raise from_refusal(exc) from None
    return types.CallToolResult.model_validate(guarded)


async def _record(money: Money, event: SpendEvent) -> None:
    try:
        await money.ledger.record(event)
    except StoreUnavailable as exc:
        log.warning("could not record MCP tool call %s: %s", event.request_id, exc)
