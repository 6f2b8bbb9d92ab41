"""``tiergate_gc_pause_seconds`` and ``tiergate_gc_collected_objects`` on ``/metrics``: the
collections the process ran while the gateway served, timed from ``gc.callbacks``, and
the callback gone once the gateway stops."""

from __future__ import annotations

import gc
import time

from gateway.telemetry.gc_pauses import GcPauses
from tests.gateway.telemetry.test_metrics import scrape, value
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import running_gateway


def _cycles(n: int) -> None:
    """``n`` lists that hold themselves: garbage only a collection frees."""
    for _ in range(n):
        ring: list[object] = []
        ring.append(ring)


def test_collections_while_serving_are_timed_and_counted() -> None:
    with running_gateway(fake_config()) as gateway:
        before = scrape(gateway)
        young = value(before, "tiergate_gc_pause_seconds_count", generation="0")
        freed = value(before, "tiergate_gc_collected_objects_total", generation="2")
        _cycles(100)
        gc.collect()  # a full collection (generation 2), in this process: the gateway's
        gc.collect(0)
        samples = scrape(gateway)
        assert value(samples, "tiergate_gc_pause_seconds_count", generation="0") >= young + 1
        assert value(samples, "tiergate_gc_pause_seconds_count", generation="2") >= 1
        assert value(samples, "tiergate_gc_pause_seconds_sum", generation="2") > 0
        assert value(samples, "tiergate_gc_collected_objects_total", generation="2") >= freed + 100
        count = value(samples, "tiergate_gc_pause_seconds_count", generation="2")
        top = value(samples, "tiergate_gc_pause_seconds_bucket", generation="2", le="+Inf")
        assert top == count
        watcher = gateway.state.parts.metrics.gc_pauses
        assert watcher in gc.callbacks
    assert watcher not in gc.callbacks


def test_a_pause_counts_in_every_bucket_that_holds_it() -> None:
    pauses = GcPauses()
    pauses._started = time.perf_counter() - 0.03  # a collection that began 30 ms ago
    pauses("stop", {"generation": 1, "collected": 7, "uncollectable": 0})
    histogram, collected = pauses.collect()
    buckets = {
        s.labels["le"]: s.value
        for s in histogram.samples
        if s.name.endswith("_bucket") and s.labels["generation"] == "1"
    }
    assert (buckets["0.025"], buckets["0.05"], buckets["+Inf"]) == (0, 1, 1)
    assert [s.value for s in collected.samples if s.labels["generation"] == "1"] == [7]
    assert [s.value for s in collected.samples if s.labels["generation"] == "0"] == [0]
