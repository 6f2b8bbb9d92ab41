"""A tiergate process's garbage-collector pauses over one load phase, from its ``/metrics``
(``tiergate_gc_pause_seconds`` and ``tiergate_gc_collected_objects``, by generation:
gateway/telemetry/gc_pauses.py). Scraped before and after the phase; the difference is
the phase's: how many collections, their whole pause, the longest (as the histogram's
bound: "at most"), and the objects they freed (objects in reference cycles)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

PAUSES = "tiergate_gc_pause_seconds"
COLLECTED = "tiergate_gc_collected_objects"


@dataclass
class GcTotals:
    buckets: dict[float, float] = field(default_factory=dict)  # bound -> pauses up to it
    seconds: float = 0.0
    collected: float = 0.0


def scrape(base_url: str) -> GcTotals | None:
    """The process's totals since it started (all generations); None where the gateway
    exports none (a branch without the metric)."""
    try:
        answer = httpx.get(base_url + "/metrics", timeout=10.0)
    except httpx.HTTPError:
        return None
    if answer.status_code != 200:  # a scrape token set: not this bench's configs
        return None
    text = answer.text
    totals, seen = GcTotals(), False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == PAUSES + "_bucket":
                bound = float(sample.labels["le"])
                totals.buckets[bound] = totals.buckets.get(bound, 0.0) + sample.value
                seen = True
            elif sample.name == PAUSES + "_sum":
                totals.seconds += sample.value
            elif sample.name == COLLECTED + "_total":
                totals.collected += sample.value
    return totals if seen else None


def phase(before: GcTotals | None, after: GcTotals | None) -> dict[str, float]:
    """``gc_collections``, ``gc_pause_ms`` (all of them), ``gc_longest_ms`` (the smallest
    bucket bound the longest pause fits under; inf past the last), ``gc_collected``."""
    if before is None or after is None:
        return {}
    added = {bound: n - before.buckets.get(bound, 0.0) for bound, n in after.buckets.items()}
    count = added.get(math.inf, 0.0)
    longest = min((bound for bound, n in added.items() if n >= count), default=0.0)
    return {
        "gc_collections": count,
        "gc_pause_ms": (after.seconds - before.seconds) * 1000,
        "gc_longest_ms": longest * 1000 if count else 0.0,
        "gc_collected": after.collected - before.collected,
    }
