"""One contract for both feedback stores: in process, and on a real Redis (one server and a
cluster), through the same assertions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from policies.stores.feedback import (
    FeedbackStore,
    Label,
    MemoryFeedbackStore,
    RefitEntry,
    RequestRecord,
    parse_count_key,
)
from policies.stores.feedback_redis import RedisFeedbackStore
from tests.redis_servers import REDIS7_URL, redis_store

VECTOR = np.linspace(-1, 1, 384).astype(np.float16).tobytes()


@pytest.fixture(params=["memory", "redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[FeedbackStore]:
    if request.param == "memory":
        yield MemoryFeedbackStore()
        return
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else REDIS7_URL
    async with redis_store(url, cluster=cluster) as owner:
        yield RedisFeedbackStore(owner)


def record(rid: str, *, cache: str = "miss", vector: bytes | None = VECTOR) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        tenant="acme",
        key_id="acme-1",
        tier="small",
        model="fake-small",
        requested_model="auto",
        cache=cache,
        entry_id="e-1" if cache != "miss" else None,
        query_text="hello there" if cache != "miss" else None,
        vector=vector,
        features=(1.0, 0.5, 0.0) if vector else None,
        cost_usd=1.5e-6,
        ts=1_700_000_000.25,
    )


def label(rid: str, ts: float, *, good: bool = True, source: str = "judge") -> Label:
    return Label(rid, "small", good, source, VECTOR, (1.0, 2.0), ts, "acme", "medium", 1e-6, 3e-6)


async def test_records_round_trip_expire_and_stay_bounded(store: FeedbackStore) -> None:
    first = [record(f"r{i}") for i in range(5)] + [record("hit", cache="semantic", vector=None)]
    await store.put_records(first, ttl_s=60, max_records=100)
    assert await store.record("r3") == first[3]  # vector bytes and features survive
    assert await store.record("hit") == first[-1]
    assert await store.record("nobody") is None
    await store.put_records([record(f"s{i}") for i in range(8)], ttl_s=60, max_records=10)
    kept = [await store.record(f"r{i}") for i in range(5)] + [await store.record("hit")]
    assert sum(r is not None for r in kept) == 2  # 14 written, the 4 oldest pushed out
    assert await store.record("r0") is None and await store.record("s7") is not None
    await store.put_records([record("short")], ttl_s=0.2, max_records=100)
    assert await store.record("short") is not None
    await asyncio.sleep(0.3)
    assert await store.record("short") is None  # expired: gone even before a purge
    await store.put_records([record("later")], ttl_s=60, max_records=100)
    assert await store.set_verdict("short", "bad") is None
    assert await store.record("later") is not None


async def test_a_verdict_is_set_once(store: FeedbackStore) -> None:
    await store.put_records([record("r1")], ttl_s=60, max_records=100)
    assert await store.set_verdict("r1", "bad") is None
    assert await store.set_verdict("r1", "good") == "bad"  # kept: the first one stands
    assert await store.set_verdict("r1", "bad") == "bad"
    assert await store.set_verdict("missing", "good") is None
    assert await store.set_verdict("missing", "good") is None  # no record: nothing was set


async def test_labels_in_time_order_bounded_by_count_and_age(store: FeedbackStore) -> None:
    now = await store.now()
    for i in range(12):
        await store.add_label(label(f"r{i}", now, good=i % 3 != 0), max_labels=10, max_age_s=3600)
    labels = await store.labels()
    assert [x.request_id for x in labels] == [f"r{i}" for i in range(2, 12)]
    assert labels[-1] == label("r11", now)  # every field, the vector included
    assert await store.kept_labels() == 10
    counts = await store.label_counts()
    assert counts == {"judge:small:good": 8, "judge:small:bad": 4}  # ever added, not kept
    assert parse_count_key("client:my:tier:bad") == {
        "source": "client",
        "tier": "my:tier",
        "verdict": "bad",
    }
    await asyncio.sleep(0.25)
    await store.add_label(label("new", await store.now()), max_labels=10, max_age_s=0.2)
    assert [x.request_id for x in await store.labels()] == ["new"]  # older than 0.2 s: gone


async def test_refits_decide_what_serves(store: FeedbackStore) -> None:
    assert await store.serving() == (0, None)
    metrics = {"holdout_loss_refit": 0.61, "holdout_loss_base": 0.69}

    def entry(decision: str) -> RefitEntry:
        return RefitEntry(1.0, decision, "why", 150, 50, metrics, by="replica-a")  # type: ignore[arg-type]

    accepted = await store.add_refit(entry("accepted"), b"model-1\x00bytes", keep=3)
    assert accepted.version == 1
    assert await store.serving() == (1, b"model-1\x00bytes")
    rolled = await store.add_refit(entry("rolled_back"), b"worse", keep=3)
    assert rolled.version == 1 and await store.serving() == (1, b"model-1\x00bytes")
    reverted = await store.add_refit(entry("reverted"), None, keep=3)
    assert reverted.version == 2 and await store.serving() == (2, None)
    assert await store.serving_version() == 2
    await store.add_refit(entry("accepted"), b"model-3", keep=3)
    history = await store.refits(10)
    assert [e.decision for e in history] == ["accepted", "reverted", "rolled_back"]  # keep=3
    assert [e.version for e in history] == [3, 2, 1]
    assert history[0].metrics == metrics and history[0].by == "replica-a"


async def test_one_refit_lease(store: FeedbackStore) -> None:
    assert await store.lease("a", ttl_s=0.3)
    assert not await store.lease("b", ttl_s=0.3)
    assert await store.lease("a", ttl_s=0.3)  # the holder renews it
    await asyncio.sleep(0.4)
    assert await store.lease("b", ttl_s=0.3)  # lapsed: another replica takes it
