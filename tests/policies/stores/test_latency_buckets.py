"""The latency histogram kept in the daily aggregates."""

from __future__ import annotations

from policies.stores.latency_buckets import BOUNDS_MS, bucket_of, quantile
from policies.stores.ledger import SpendEvent


def test_buckets_are_upper_bounds() -> None:
    assert bucket_of(0) == "10" and bucket_of(10) == "10" and bucket_of(10.5) == "25"
    assert bucket_of(BOUNDS_MS[-1]) == str(BOUNDS_MS[-1]) and bucket_of(10**9) == "inf"


def test_quantile_is_the_bound_holding_the_rank() -> None:
    counts = {"100": 98.0, "500": 1.0, "2000": 1.0}
    assert quantile(counts, 0.5) == 100 and quantile(counts, 0.99) == 500
    assert quantile(counts, 1.0) == 2000
    assert quantile({}, 0.99) == 0.0 and quantile({"inf": 2.0}, 0.5) == BOUNDS_MS[-1]


def test_only_served_requests_feed_the_histogram() -> None:
    base = {
        "ts": 1.0,
        "request_id": "r",
        "tenant": "t",
        "key_id": "k",
        "tier": "small",
        "model": "m",
    }
    served = SpendEvent(**base, latency_ms=420.0, ttft_ms=60.0).increments()  # type: ignore[arg-type]
    assert served["latency_ms_le:small:500"] == 1 and served["ttft_ms_le:small:100"] == 1
    for other in (
        SpendEvent(**base, status="error", latency_ms=420.0),  # type: ignore[arg-type]
        SpendEvent(**base, kind="denied", status="budget"),  # type: ignore[arg-type]
    ):
        assert not [k for k in other.increments() if "_ms_le:" in k]
