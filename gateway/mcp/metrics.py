"""The tool calls' Prometheus series, on the gateway's own registry (``/metrics``).

Labels come from the config (servers, tenants where ``metrics.tenant_label``) and a fixed
set of statuses; the tool itself is left to the ledger and the dashboard (an upstream
decides how many tools it has, not the config).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.mcp.outcome import ToolOutcome

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class McpMetrics:
    def __init__(self, registry: CollectorRegistry, tenant_label: bool) -> None:
        self.tenant_label = tenant_label
        t = ("tenant",) if tenant_label else ()
        self.calls = Counter(
            "tiergate_mcp_tool_calls",
            "MCP tool calls, by upstream server and status (denied: refused before the call).",
            (*t, "server", "status"),
            registry=registry,
        )
        self.duration = Histogram(
            "tiergate_mcp_tool_call_duration_seconds",
            "MCP tool calls end to end in the gateway (admission, upstream, settlement).",
            ("server",),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.cost = Counter(
            "tiergate_mcp_tool_cost_usd",
            "USD charged for MCP tool calls.",
            (*t, "server"),
            registry=registry,
        )
        self.result_bytes = Counter(
            "tiergate_mcp_tool_result_bytes",
            "Bytes of MCP tool results passed to clients.",
            ("server",),
            registry=registry,
        )
        self.listing_failures = Counter(
            "tiergate_mcp_listing_failures",
            "Upstream listings (tools, prompts, resources) that failed; the upstream's "
            "entries were left out of the answer.",
            ("server",),
            registry=registry,
        )

    def record(self, tenant: str, outcome: ToolOutcome) -> None:
        t = (tenant,) if self.tenant_label else ()
        status = f"denied_{outcome.denied}" if outcome.denied else outcome.status
        self.calls.labels(*t, outcome.server, status).inc()
        if outcome.denied is None:
            self.duration.labels(outcome.server).observe(outcome.latency_s)
            self.result_bytes.labels(outcome.server).inc(outcome.result_bytes)
        if outcome.cost_usd:
            self.cost.labels(*t, outcome.server).inc(outcome.cost_usd)
