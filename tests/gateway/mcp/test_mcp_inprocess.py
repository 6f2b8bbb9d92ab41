"""``/mcp`` of a gateway running in this process (its state in reach): a tool call's span
in the trace of the model call that asked for it, ``mcp.servers`` reloaded with the
policy, an SSE upstream, and stateful sessions bound to their key and bounded."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from gateway.cluster.reload import reload_policies
from policies.schema import GatewayConfig
from tests.gateway.mcp_support import call, http_upstream, mcp_client, stdio_server, text_of
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow


def policy(servers: dict[str, Any], **mcp: Any) -> GatewayConfig:
    config = fake_config()
    config["tenants"]["acme"]["mcp_tools"] = ["*"]
    config["tenants"]["globex"]["mcp_tools"] = ["*"]
    config["mcp"] = {"servers": servers, **mcp}
    return GatewayConfig.model_validate(config)


@pytest.fixture(scope="module")
def sse_url() -> Iterator[str]:
    with http_upstream("events", transport="sse") as url:
        yield url


@pytest.fixture(scope="module")
def traced(sse_url: str) -> Iterator[tuple[RunningGateway, InMemorySpanExporter, list[Any]]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    servers = {
        "calc": stdio_server("calc"),
        "gone": stdio_server("gone"),
        "events": {"url": sse_url, "transport": "sse"},
    }
    current = [policy(servers)]
    with running_gateway(current[0], lambda: current[0], tracer_provider=provider) as gateway:
        yield gateway, exporter, current


def test_a_tool_call_joins_the_trace_of_the_model_call_that_asked_for_it(
    traced: tuple[RunningGateway, InMemorySpanExporter, list[Any]],
) -> None:
    gateway, exporter, _ = traced
    trace_id, parent_id = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
    traceparent = f"00-{trace_id:032x}-{parent_id:016x}-01"
    chat = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {TEST_KEY}", "traceparent": traceparent},
        json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
    )
    model_request = chat.headers["x-request-id"]
    linked = {"traceparent": traceparent, "x-tiergate-model-request-id": model_request}

    async def scenario() -> None:
        async with mcp_client(gateway.base_url, TEST_KEY, headers=linked) as client:
            assert text_of(await call(client, "calc.add", {"a": 1, "b": 2})) == "3"
        # The MCP SDKs carry the caller's trace in _meta.traceparent: that one wins.
        other = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
        token = otel_context.attach(set_span_in_context(NonRecordingSpan(other)))
        try:
            async with mcp_client(gateway.base_url, TEST_KEY) as client:
                assert text_of(await call(client, "calc.echo", {"text": "x"})) == "x"
        finally:
            otel_context.detach(token)

    asyncio.run(scenario())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool = spans["execute_tool calc.add"]
    assert tool.context is not None and tool.parent is not None
    assert tool.context.trace_id == trace_id and tool.parent.span_id == parent_id
    assert tool.attributes is not None
    assert tool.attributes["tiergate.model_request_id"] == model_request
    assert tool.attributes["tiergate.tool.status"] == "ok"
    model = next(s for s in spans.values() if s.name.startswith("chat"))
    assert model.context is not None and model.context.trace_id == trace_id  # one trace
    echoed = spans["execute_tool calc.echo"]
    assert echoed.context is not None and echoed.parent is not None
    assert (echoed.context.trace_id, echoed.parent.span_id) == (0xABC, 0xDEF)
    ledger = gateway.state.parts.money.ledger
    events = gateway.call(ledger.events(time.time() - 600, time.time() + 1))
    event = next(e for e in events if e.kind == "tool_call" and e.tool == "add")
    assert event.metadata == {"model_request_id": model_request}


def test_an_sse_upstream(traced: tuple[RunningGateway, InMemorySpanExporter, list[Any]]) -> None:
    gateway = traced[0]

    async def scenario() -> str:
        async with mcp_client(gateway.base_url, TEST_KEY, "legacy") as client:
            return text_of(await call(client, "events.add", {"a": 20, "b": 22}))

    assert asyncio.run(scenario()) == "42"


def test_mcp_servers_reload_with_the_policy(
    traced: tuple[RunningGateway, InMemorySpanExporter, list[Any]],
) -> None:
    gateway, _, current = traced

    async def whoami(*names: str) -> dict[str, str]:
        async with mcp_client(gateway.base_url, TEST_KEY) as client:
            return {n: text_of(await call(client, f"{n}.whoami")).split()[1] for n in names}

    before = asyncio.run(whoami("calc", "gone"))
    servers = dict(current[0].mcp.model_dump()["servers"])
    del servers["gone"]
    servers["fresh"] = stdio_server("fresh")
    current[0] = policy(servers)
    gateway.call(reload_policies(gateway.state))

    async def names() -> set[str]:
        async with mcp_client(gateway.base_url, TEST_KEY) as client:
            return {t.name.partition(".")[0] for t in (await client.list_tools()).tools}

    assert asyncio.run(names()) == {"calc", "fresh", "events"}
    after = asyncio.run(whoami("calc", "fresh"))
    assert after["calc"] == before["calc"]  # an unchanged server keeps its process
    gone = int(before["gone"].removeprefix("pid="))
    deadline = time.monotonic() + 15
    while _alive(gone) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(gone), "the removed server's process still runs"
    audit = gateway.call(gateway.state.audit.recent(20))
    change = next(e for e in audit if e.action == "mcp.servers")
    assert change.before is not None and change.after is not None
    assert "gone" in change.before and "fresh" in change.after and "gone" not in change.after


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stateful_sessions_are_bound_to_their_key_and_bounded() -> None:
    config = policy(
        {"calc": stdio_server("calc")}, sessions={"stateless": False, "max_sessions": 2}
    )
    accept = {"Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    with running_gateway(config) as gateway:
        url = f"{gateway.base_url}/mcp"

        def post(key: str, body: dict[str, Any], session: str | None = None) -> httpx.Response:
            headers = {**accept, "Authorization": f"Bearer {key}"}
            if session is not None:
                headers |= {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
            return httpx.post(url, headers=headers, json=body)

        opened = post(TEST_KEY, initialize)
        session = opened.headers["mcp-session-id"]
        assert opened.status_code == 200 and session
        mine = post(TEST_KEY, listing, session)
        assert mine.status_code == 200 and mine.json()["result"]["tools"]
        # Another tenant's key cannot use it: as if it did not exist.
        assert post(OTHER_KEY, listing, session).status_code == 404
        assert post(OTHER_KEY, initialize).status_code == 200  # the second session
        refused = post(OTHER_KEY, initialize)  # a third: over max_sessions
        assert refused.status_code == 503
