"""How long the garbage collector stops the process, and what it frees.

``tiergate_gc_pause_seconds`` (a histogram by generation) times every collection from
``gc.callbacks``; ``tiergate_gc_collected_objects`` counts the objects each freed, which
are objects in reference cycles: a request that makes none leaves the collector nothing.
A young collection stops the event loop, so every stream in flight waits it out (at the
threshold the gateway serves with, ``gateway.app.GC_YOUNG_THRESHOLD``, that can be tens of
milliseconds: docs/performance.md, "GC pauses and the stall"). bench/perf/overhead.py
scrapes both per phase.

The callback runs inside the collector, wherever an allocation started it, perhaps inside
prometheus_client's own (non-reentrant) lock: so it takes no lock and only adds to plain
counters, which ``collect`` turns into metric families when ``/metrics`` is scraped.
"""

from __future__ import annotations

import gc
import time
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric

PAUSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
GENERATIONS = 3


class GcPauses:
    """A prometheus_client collector fed by ``gc.callbacks`` while ``watching``."""

    def __init__(self) -> None:
        self._started = 0.0
        # Per generation: pauses per bucket (the last one past every bound), their sum,
        # and the objects freed.
        self._counts = [[0] * (len(PAUSE_BUCKETS) + 1) for _ in range(GENERATIONS)]
        self._seconds = [0.0] * GENERATIONS
        self._collected = [0] * GENERATIONS

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        generation = info["generation"]
        self._counts[generation][bisect_left(PAUSE_BUCKETS, pause)] += 1
        self._seconds[generation] += pause
        self._collected[generation] += info["collected"]

    @contextmanager
    def watching(self) -> Iterator[None]:
        gc.callbacks.append(self)
        try:
            yield
        finally:
            gc.callbacks.remove(self)

    def collect(self) -> Iterator[Metric]:
        pauses = HistogramMetricFamily(
            "tiergate_gc_pause_seconds",
            "Garbage-collector pauses (the whole process stops), by generation.",
            labels=["generation"],
        )
        collected = CounterMetricFamily(
            "tiergate_gc_collected_objects",
            "Objects the garbage collector freed (objects in reference cycles), by generation.",
            labels=["generation"],
        )
        for generation in range(GENERATIONS):
            label = [str(generation)]
            running = list(accumulate(self._counts[generation]))
            buckets: list[tuple[str, Any]] = [
                (str(bound), count) for bound, count in zip(PAUSE_BUCKETS, running, strict=False)
            ]
            buckets.append(("+Inf", running[-1]))
            pauses.add_metric(label, buckets, self._seconds[generation])
            collected.add_metric(label, self._collected[generation])
        yield pauses
        yield collected
