"""OpenTelemetry traces: one trace per request, one child span per pipeline stage.

Off unless the standard ``OTEL_*`` variables ask for OTLP export (or a test hands in a
provider): then every call here is a check of one attribute and returns a shared
no-op, so the hot path pays nothing measurable.

Stage owners wrap their stage with ``stage(AUTH)`` (any code that runs inside a
traced route handler) or ``run.trace.stage(...)`` (code that holds the ``Run``,
including while a stream is written). Stages are children of the request's root span
and never become the current span, so streaming across ``await`` points is safe.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from time import perf_counter
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import (
    INVALID_SPAN,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue
from starlette.requests import Request

from gateway.telemetry.timing import StageTimer, current_timer

log = logging.getLogger(__name__)

# Stage span names; each stage's owner wraps its own stage with one of these.
AUTH = "auth"
CACHE_LOOKUP = "cache.lookup"
EMBEDDING = "embedding"
CLASSIFICATION = "classification"
BUDGET_RESERVATION = "budget.reservation"
GENERATION = "generation"
SETTLEMENT = "settlement"

_NO_STAGE: AbstractContextManager[Span] = nullcontext(INVALID_SPAN)


class RequestTrace:
    """One request's root span. ``NO_TRACE`` (no tracer) makes every method a no-op."""

    __slots__ = ("_context", "_ended", "_tracer", "root")

    def __init__(self, tracer: Tracer | None, root: Span) -> None:
        self._tracer = tracer
        self.root = root
        self._context: Context | None = set_span_in_context(root) if tracer else None
        self._ended = False

    @property
    def recording(self) -> bool:
        return self._tracer is not None

    def stage(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[Span]:
        """A child span around a block; an exception marks it failed and passes through."""
        timer = current_timer()  # per-stage Server-Timing (server.timing_header)
        if self._tracer is None:
            return _NO_STAGE if timer is None else _timed_stage(timer, name)
        return self._stage(name, attributes, timer)

    @contextmanager
    def _stage(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue] | None,
        timer: StageTimer | None = None,
    ) -> Any:
        span = self.start(name, attributes)
        started = perf_counter()
        try:
            yield span
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            span.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            span.end()
            if timer is not None:
                timer.add(name, perf_counter() - started)

    def start(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> Span:
        """A child span the caller ends (for a stage that spans a stream)."""
        if self._tracer is None:
            return INVALID_SPAN
        return self._tracer.start_span(name, self._context, kind, attributes)

    def set(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self._tracer is not None:
            self.root.set_attributes(attributes)

    def rename(self, name: str) -> None:
        if self._tracer is not None:
            self.root.update_name(name)

    def end(self, status: int, error_type: str | None = None) -> None:
        if self._tracer is None or self._ended:
            return
        self._ended = True
        self.root.set_attribute("http.response.status_code", status)
        if error_type is not None:
            self.root.set_attribute("error.type", error_type)
            self.root.set_status(Status(StatusCode.ERROR, error_type))
        self.root.end()


@contextmanager
def _timed_stage(timer: StageTimer, name: str) -> Iterator[Span]:
    started = perf_counter()
    try:
        yield INVALID_SPAN
    finally:
        timer.add(name, perf_counter() - started)


NO_TRACE = RequestTrace(None, INVALID_SPAN)
_current: ContextVar[RequestTrace] = ContextVar("tiergate_trace", default=NO_TRACE)


def current_trace() -> RequestTrace:
    return _current.get()


@contextmanager
def active(trace: RequestTrace) -> Iterator[None]:
    """``trace`` is the current one inside the block (``current_trace``, ``stage``)."""
    token = _current.set(trace)
    try:
        yield
    finally:
        _current.reset(token)


def stage(
    name: str, attributes: Mapping[str, AttributeValue] | None = None
) -> AbstractContextManager[Span]:
    """A child span of the current request's trace (a no-op when tracing is off)."""
    return _current.get().stage(name, attributes)


class Tracing:
    """What the lifespan builds: a tracer (or none) and its provider to shut down."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("tiergate") if provider is not None else None

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def begin(self, operation: str, request: Request) -> RequestTrace:
        if self.tracer is None:
            return NO_TRACE
        parent = TraceContextTextMapPropagator().extract(dict(request.headers))
        root = self.tracer.start_span(
            operation,
            parent,
            SpanKind.SERVER,
            {
                "gen_ai.operation.name": operation,
                "http.request.method": request.method,
                "url.path": request.url.path,
            },
        )
        return RequestTrace(self.tracer, root)

    def begin_job(self, operation: str, attributes: Mapping[str, AttributeValue]) -> RequestTrace:
        """A trace for work no HTTP request carries (a batch line): its own root span."""
        if self.tracer is None:
            return NO_TRACE
        root = self.tracer.start_span(operation, None, SpanKind.CONSUMER, attributes)
        return RequestTrace(self.tracer, root)

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking: run it off the loop)."""
        if self.provider is not None:
            self.provider.shutdown()


def otlp_requested(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol.strip() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


def open_tracing(provider: TracerProvider | None = None) -> Tracing:
    """The given provider (tests), else OTLP when ``OTEL_*`` asks for it, else off."""
    if provider is not None:
        return Tracing(provider)
    env = dict(os.environ)
    if not otlp_requested(env):
        return Tracing(None)
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "tiergate")})
    built = TracerProvider(resource=resource)
    built.add_span_processor(BatchSpanProcessor(_otlp_exporter(env)))
    log.info("tracing: OTLP export on")
    return Tracing(built)
