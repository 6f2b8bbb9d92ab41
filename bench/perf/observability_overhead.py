"""What observability costs per request, against the request itself, measured in one run.

1. Tracing off (no ``OTEL_*``): the per-request calls the pipeline makes — the route
   wrapper's check, ``stage()`` twice, ``current_trace()``, the generation span — timed
   in a loop, next to the metrics recording, in microseconds.
2. Whole requests through a real uvicorn on loopback (fake engine, official client):
   tracing off vs tracing on into an in-memory exporter; requests per second.

Usage: python -m bench.perf.observability_overhead [--requests 300] [--repeats 5]
Prints medians and ranges; ratios are against the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.telemetry.metrics import GatewayMetrics, RequestRecord
from gateway.telemetry.tracing import AUTH, GENERATION, SETTLEMENT, current_trace, stage
from policies.schema import GatewayConfig
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (range {min(values):.2f}-{max(values):.2f})"


def disabled_tracing_us(loops: int) -> float:
    def one_request() -> None:
        trace = current_trace()
        with stage(AUTH):
            pass
        span = trace.start(GENERATION)
        with trace.stage(SETTLEMENT):
            pass
        span.end()

    return timeit.timeit(one_request, number=loops) / loops * 1e6


def metrics_us(metrics: GatewayMetrics, loops: int) -> float:
    record = RequestRecord(
        "acme", "small", "fake-small", "ok", "miss", 20, 16, 0, 1e-5, 1e-4, 0.0, 0.05, 0.01
    )
    return timeit.timeit(lambda: metrics.request_ended(record), number=loops) / loops * 1e6


def requests_per_s(n: int, provider: TracerProvider | None) -> float:
    config = fake_config(tokens=16)
    with running_gateway(config, tracer_provider=provider) as gateway:
        body = {"model": "small", "messages": [{"role": "user", "content": "hello"}]}
        headers = {"authorization": f"Bearer {TEST_KEY}"}
        with httpx.Client(base_url=gateway.base_url, headers=headers) as client:
            for _ in range(20):
                client.post("/v1/chat/completions", json=body).raise_for_status()
            started = time.perf_counter()
            for _ in range(n):
                client.post("/v1/chat/completions", json=body).raise_for_status()
            return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    metrics = GatewayMetrics(GatewayConfig.model_validate(fake_config()))
    off = [disabled_tracing_us(20_000) for _ in range(args.repeats)]
    rec = [metrics_us(metrics, 20_000) for _ in range(args.repeats)]
    plain, traced = [], []
    for _ in range(args.repeats):
        plain.append(requests_per_s(args.requests, None))
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        traced.append(requests_per_s(args.requests, provider))
    per_request_us = [1e6 / r for r in plain]
    request_us = statistics.median(per_request_us)
    print(f"tracing off, per request:         {spread(off)} us")
    print(f"metrics recording, per request:   {spread(rec)} us")
    print(f"whole request, tracing off:       {spread(per_request_us)} us")
    print(f"whole request, tracing on:        {spread([1e6 / r for r in traced])} us")
    print(f"tracing-off calls / request time: {statistics.median(off) / request_us:.4%}")
    print(f"metrics / request time:           {statistics.median(rec) / request_us:.4%}")
    ratios = [t / p for t, p in zip(traced, plain, strict=True)]
    print(f"throughput tracing on / off:      {spread(ratios)}")


if __name__ == "__main__":
    main()
