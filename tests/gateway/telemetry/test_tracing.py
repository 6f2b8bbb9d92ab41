"""Traces: names, parent-child structure and GenAI attributes, read from an in-memory
exporter; then real OTLP/HTTP export to a collector on loopback when ``OTEL_*`` asks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, SpanKind, StatusCode

from gateway.telemetry.tracing import AUTH, stage
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway


@pytest.fixture
def traced() -> Iterator[tuple[RunningGateway, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = fake_config(tokens=5)
    config["engines"]["fake-large"]["options"] = {"dead": True}
    config["tiers"]["large"]["fallback"] = None
    with running_gateway(config, tracer_provider=provider) as gateway:
        yield gateway, exporter


def roots(exporter: InMemorySpanExporter, count: int) -> list[ReadableSpan]:
    """Wait (bounded) until ``count`` root spans ended: a stream's root ends after its last byte."""
    for _ in range(200):
        found = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
        if len(found) >= count:
            return found
        time.sleep(0.01)
    raise AssertionError(f"only {len(found)} root spans")


def children(exporter: InMemorySpanExporter, root: ReadableSpan) -> dict[str, ReadableSpan]:
    assert root.context is not None
    found = {}
    for span in exporter.get_finished_spans():
        if span.parent is not None and span.parent.span_id == root.context.span_id:
            assert span.context is not None and span.context.trace_id == root.context.trace_id
            found[span.name] = span
    return found


def test_one_trace_per_request_with_stage_children(
    traced: tuple[RunningGateway, InMemorySpanExporter],
) -> None:
    gateway, exporter = traced
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=TEST_KEY, max_retries=0)
    reply = client.chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=4,
        temperature=0.5,
    )
    assert reply.usage is not None
    (root,) = roots(exporter, 1)
    assert root.name == "chat small" and root.parent is None
    assert root.attributes is not None and root.attributes["http.response.status_code"] == 200
    spans = children(exporter, root)
    assert set(spans) == {"auth", "generation", "settlement"}
    gen = spans["generation"].attributes
    assert gen is not None
    assert gen["gen_ai.operation.name"] == "chat"
    assert gen["gen_ai.request.model"] == "small"
    assert gen["gen_ai.response.model"] == "fake-small"
    assert gen["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert gen["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens == 4
    assert gen["gen_ai.request.max_tokens"] == 4 and gen["gen_ai.request.temperature"] == 0.5
    assert tuple(gen["gen_ai.response.finish_reasons"]) == ("length",)  # type: ignore[arg-type]
    assert gen["gen_ai.response.id"] == reply.id
    assert (gen["tiergate.tier"], gen["tiergate.tenant"], gen["tiergate.cache"]) == (
        "small",
        "acme",
        "bypass",
    )
    assert root.attributes["gen_ai.usage.output_tokens"] == 4
    assert (
        spans["auth"].attributes is not None
        and spans["auth"].attributes["tiergate.tenant"] == "acme"
    )
    # Stages nest inside the request, in pipeline order.
    assert root.start_time is not None and root.end_time is not None
    assert spans["auth"].start_time is not None and spans["settlement"].end_time is not None
    assert (
        root.start_time <= spans["auth"].start_time
        and spans["settlement"].end_time <= root.end_time
    )


def test_stream_joins_the_callers_trace_and_failures_are_marked(
    traced: tuple[RunningGateway, InMemorySpanExporter],
) -> None:
    gateway, exporter = traced
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {
        "authorization": f"Bearer {TEST_KEY}",
        "traceparent": f"00-{caller_trace}-{caller_span}-01",
    }
    body = {"model": "medium", "prompt": "a b c", "stream": True}
    with httpx.stream(
        "POST", f"{gateway.base_url}/v1/completions", json=body, headers=headers
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    (root,) = roots(exporter, 1)
    assert root.name == "text_completion medium"
    assert root.context is not None and f"{root.context.trace_id:032x}" == caller_trace
    assert root.parent is not None and f"{root.parent.span_id:016x}" == caller_span
    gen = children(exporter, root)["generation"].attributes
    assert gen is not None and gen["gen_ai.operation.name"] == "text_completion"
    assert gen["gen_ai.usage.output_tokens"] == 5

    # A dead tier: the generation span and the root are marked failed.
    failed = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        json={"model": "large", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {TEST_KEY}"},
    )
    assert failed.status_code == 503
    root = next(s for s in roots(exporter, 2) if s.name == "chat large")
    assert root.status.status_code == StatusCode.ERROR
    assert root.attributes is not None and root.attributes["http.response.status_code"] == 503
    # What the engine said is in the trace for the operator, not in the client's answer.
    assert "no healthy replica" in str(root.attributes["tiergate.error.detail"])
    assert "healthy" not in failed.text
    assert children(exporter, root)["generation"].status.status_code == StatusCode.ERROR

    # A bad key: the auth span fails and nothing else runs.
    refused = httpx.post(
        f"{gateway.base_url}/v1/chat/completions", json={}, headers={"authorization": "Bearer nope"}
    )
    assert refused.status_code == 401
    root = next(s for s in roots(exporter, 3) if s.name == "chat")
    assert root.attributes is not None and root.attributes["error.type"] == "invalid_api_key"
    spans = children(exporter, root)
    assert set(spans) == {"auth"} and spans["auth"].status.status_code == StatusCode.ERROR


def test_off_without_otel_variables_and_stage_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    with stage(AUTH) as span:
        assert span is INVALID_SPAN
    with running_gateway(fake_config()) as gateway:
        assert not gateway.state.tracing.enabled
        response = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            json={"model": "small", "messages": [{"role": "user", "content": "x"}]},
            headers={"authorization": f"Bearer {TEST_KEY}"},
        )
        assert response.status_code == 200


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        Collector.received.append((self.path, body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


def test_otlp_export_when_otel_variables_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    Collector.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}"
    )
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tiergate-test")
    try:
        with running_gateway(fake_config()) as gateway:
            assert gateway.state.tracing.enabled
            response = httpx.post(
                f"{gateway.base_url}/v1/chat/completions",
                json={"model": "small", "messages": [{"role": "user", "content": "x"}]},
                headers={"authorization": f"Bearer {TEST_KEY}"},
            )
            assert response.status_code == 200
        # Shutting the gateway down flushed the batch.
    finally:
        server.shutdown()
        server.server_close()
    assert Collector.received and {path for path, _ in Collector.received} == {"/v1/traces"}
    names: set[str] = set()
    services: set[str] = set()
    for _, body in Collector.received:
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            services |= {
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            }
            names |= {span.name for scope in resource_spans.scope_spans for span in scope.spans}
    assert services == {"tiergate-test"}
    assert names == {"chat small", "auth", "generation", "settlement"}
