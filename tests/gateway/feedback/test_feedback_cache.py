"""A cached answer flagged wrong is evicted for every replica and becomes a cache label.

Two real gateways (uvicorn on loopback) share one real Redis 7: its cache (exact entries
and the stream-synced semantic index) and the feedback records. Called with the official
client: a hit's record keeps the hit's ``Lookup.entry_id``; ``POST /v1/feedback`` with a
bad verdict on it, from either replica, evicts the entry (the next identical request is a
miss on both), stores the pair as a ``match: false`` label (``GET
/admin/api/cache/{tenant}/labels``) and says so; another tenant cannot flag it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import openai
import pytest

from tests.redis_servers import REDIS7_URL, cache_prefix, delete_prefix, unique_root
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow

ADMIN_KEY = "tg-admin-key-for-feedback-cache"
EXACT = "What is the tallest mountain in Africa?"
QUESTION = "What is the boiling point of water at sea level?"
PARAPHRASE = "At sea level, what's the boiling point of water?"
NO_STORE = {"cache-control": "no-store"}  # a check that must not refill the cache


@pytest.fixture(scope="module")
def replicas() -> Iterator[tuple[RunningGateway, RunningGateway]]:
    root, prefix = unique_root(), cache_prefix()
    os.environ["TIERGATE_FEEDBACK_CACHE_ADMIN"] = ADMIN_KEY
    config: dict[str, Any] = fake_config()
    config.update(redis_url=REDIS7_URL, redis_prefix=root)
    config["admin"] = {"key_from_env": "TIERGATE_FEEDBACK_CACHE_ADMIN"}
    config["cache"] = {"semantic": True, "key_prefix": prefix}
    config["routing"] = {
        "classifier": {"max_wait_ms": 1},
        "feedback": {
            "sample": 0.0,  # records only: the verdicts are the client's
            "judge": {"tier": "large"},
            "record_flush_s": 0.05,
            "refit": {"online": False},
        },
    }
    try:
        with ExitStack() as stack:
            a = stack.enter_context(running_gateway(config))
            b = stack.enter_context(running_gateway(config))
            yield a, b
    finally:
        delete_prefix(REDIS7_URL, root)
        delete_prefix(REDIS7_URL, prefix)


def ask(gateway: RunningGateway, prompt: str, key: str = TEST_KEY, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model="small", temperature=0, messages=[{"role": "user", "content": prompt}], **extra
    )


def status(raw: Any) -> str:
    value: str = raw.headers["x-tiergate-cache"]
    return value


def verdict(gateway: RunningGateway, rid: str, key: str = TEST_KEY) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/feedback",
        json={"request_id": rid, "verdict": "bad"},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def cache_labels(gateway: RunningGateway) -> list[dict[str, Any]]:
    got = httpx.get(
        gateway.base_url + "/admin/api/cache/acme/labels",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert got.status_code == 200, got.text
    rows: list[dict[str, Any]] = got.json()["labels"]
    return rows


def until(check: Any, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_bad_verdict_on_an_exact_hit_evicts_it_for_every_replica(
    replicas: tuple[RunningGateway, RunningGateway],
) -> None:
    a, b = replicas
    assert status(ask(a, EXACT)) == "miss"
    hit = ask(b, EXACT)  # B's hit on A's entry, through the shared Redis
    assert status(hit) == "exact"
    rid = hit.parse().id
    record = until(lambda: b.call(b.state.parts.feedback.record(rid)))  # type: ignore[union-attr]
    assert record.entry_id is not None and record.query_text == EXACT

    # Another tenant's key: the same 404 as an unknown id, and the entry stays.
    stranger = verdict(a, rid, key=OTHER_KEY)
    assert stranger.status_code == 404 and stranger.json()["error"]["code"] == "request_not_found"
    assert status(ask(a, EXACT, extra_headers=NO_STORE)) == "exact"

    # The verdict, given at A on B's request (the record is in the shared store).
    until(lambda: a.call(a.state.parts.feedback.store.record(rid)))  # type: ignore[union-attr]
    got = verdict(a, rid)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["cache"] == "exact" and body["cache_evicted"] is True
    assert body["labelled_tier"] is None  # a cached answer's verdict is the cache's
    for gateway in (a, b):  # gone for both replicas
        assert status(ask(gateway, EXACT, extra_headers=NO_STORE)) == "miss"
    again = verdict(b, rid)  # the same verdict again: a no-op, nothing left to evict
    assert again.status_code == 200 and again.json()["cache_evicted"] is False
    mine = [x for x in cache_labels(a) if x["entry_id"] == record.entry_id]
    assert [(x["b"], x["match"], x["kind"]) for x in mine] == [(EXACT, False, "feedback")]


def test_a_bad_verdict_on_a_semantic_hit_evicts_the_entry_it_came_from(
    replicas: tuple[RunningGateway, RunningGateway],
) -> None:
    a, b = replicas
    assert status(ask(a, QUESTION)) == "miss"
    # On Redis 7 B learns of A's entry through the stream: allow it a moment.
    hit = until(
        lambda: (r := ask(b, PARAPHRASE, extra_headers=NO_STORE)) and status(r) == "semantic" and r
    )
    assert hit, "no semantic hit on B"
    rid = hit.parse().id
    until(lambda: b.call(b.state.parts.feedback.store.record(rid)))  # type: ignore[union-attr]
    assert verdict(b, rid, key=OTHER_KEY).status_code == 404
    got = verdict(b, rid)
    assert got.status_code == 200, got.text
    assert got.json()["cache"] == "semantic" and got.json()["cache_evicted"] is True
    # The entry is gone from both replicas' indexes (A's own, B's by the stream's del).
    for gateway in (b, a):
        seen = until(lambda g=gateway: status(ask(g, PARAPHRASE, extra_headers=NO_STORE)) == "miss")
        assert seen, f"{gateway.base_url} still serves the evicted entry"
        assert status(ask(gateway, QUESTION, extra_headers=NO_STORE)) == "miss"
    (label,) = [x for x in cache_labels(b) if x["b"] == PARAPHRASE]
    assert label["a"] == QUESTION and label["match"] is False and label["kind"] == "feedback"
