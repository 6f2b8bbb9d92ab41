"""``routing.feedback`` through a real gateway (uvicorn on loopback, the shipped classifier,
the fake engines, the in-process store), called with the official client: shadow answers
charged to the operator scope, the judge's labels, ``POST /v1/feedback`` and its errors,
and shadows dropped (not queued) under load without delaying any answer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.learning.operator_calls import FEEDBACK_TENANT
from gateway.learning.sampler import shadow_tier
from policies.feedback_spec import OPERATOR_SCOPE
from policies.stores.budget import Scope, tenant_scope
from policies.stores.feedback import Label
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

PROMPTS = {  # prompt -> known per-tier correctness, for the judge that knows the labels
    "What is the capital of France?": {"small": 1, "medium": 1, "large": 1},
    "Prove that there are infinitely many primes of the form 4k+3.": {
        "small": 0,
        "medium": 0,
        "large": 1,
    },
}
SLOW = "Name three rivers that flow into the North Sea."


def feedback_config(tmp: Path, **feedback: Any) -> dict[str, Any]:
    labels = tmp / "labels.jsonl"
    rows = {**PROMPTS, SLOW: {"small": 1, "medium": 1, "large": 1}}
    labels.write_text(
        "".join(json.dumps({"prompt": p, "tiers": t}) + "\n" for p, t in rows.items())
    )
    config = fake_config()
    config["routing"] = {
        "classifier": {"max_wait_ms": 1},
        "feedback": {
            "sample": 1.0,
            "judge": {"labels": str(labels)},
            "record_flush_s": 0.05,
            "budget": {"limit_usd": 5.0},
            "refit": {"online": False},
            **feedback,
        },
    }
    return config


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with running_gateway(feedback_config(tmp_path_factory.mktemp("feedback"))) as running:
        yield running


def ask(gateway: RunningGateway, prompt: str, key: str = TEST_KEY, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": prompt}], **extra
    )


def verdict(gateway: RunningGateway, body: Any, key: str = TEST_KEY) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/feedback",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def labels(gateway: RunningGateway) -> list[Label]:
    assert gateway.state.parts.feedback is not None
    found: list[Label] = gateway.call(gateway.state.parts.feedback.store.labels())
    return found


def wait_for(check: Any, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_shadow_pair_becomes_a_label_paid_by_the_operator(gateway: RunningGateway) -> None:
    state = gateway.state
    tenant = [Scope(tenant_scope("acme"), None)]
    tenant_before = gateway.call(state.parts.money.budgets.status(tenant))[0].spent_usd
    prompt = "Prove that there are infinitely many primes of the form 4k+3."
    raw = ask(gateway, prompt)
    answer, tier = raw.parse(), raw.headers["x-tiergate-tier"]
    cost = float(raw.headers["x-tiergate-cost-usd"])

    def of_answer() -> list[Label]:
        found = [x for x in labels(gateway) if x.request_id == answer.id]
        return found if len(found) == 2 else []

    mine = wait_for(of_answer)
    label, of_reference = mine  # both answers of the pair are judged, each on its own
    tiers = list(state.config.tiers)
    other = shadow_tier(tiers, tier, answer.id)
    cheaper, reference = sorted((tier, other), key=tiers.index)
    assert (label.tier, label.reference_tier) == (cheaper, reference)
    assert (of_reference.tier, of_reference.reference_tier) == (reference, None)
    known = PROMPTS[prompt]  # the rubric's verdicts: each answer acceptable when it is right
    assert label.acceptable is (known[cheaper] >= 0.5)
    assert of_reference.acceptable is (known[reference] >= 0.5)
    for x in mine:
        assert x.source == "judge" and x.tenant == "acme"
        assert x.vector is not None and len(x.vector) == 384 * 2  # float16 MiniLM
        assert x.features is not None and len(x.features) == 20
    wait_for(lambda: state.parts.money.journal.pending == 0 and not state.parts.money.background)
    tenant_after = gateway.call(state.parts.money.budgets.status(tenant))[0].spent_usd
    operator = gateway.call(state.parts.money.budgets.status(_operator_scope(gateway)))[0]
    assert tenant_after - tenant_before == pytest.approx(cost, rel=1e-6)  # its answer only
    assert operator.spent_usd > 0 and operator.limit_usd == 5.0  # the shadow's, the operator's
    events = gateway.call(state.parts.money.ledger.events(0, time.time() + 1, 50))
    shadow = [e for e in events if e.request_id == f"{answer.id}-shadow"]
    assert [(e.tenant, e.key_id, e.tier) for e in shadow] == [(FEEDBACK_TENANT, "shadow", other)]


def _operator_scope(gateway: RunningGateway) -> list[Any]:
    from gateway.learning.operator_calls import operator_scopes

    scopes = operator_scopes(gateway.state.config)
    assert scopes[1].name == OPERATOR_SCOPE
    return scopes[1:]


def test_client_verdicts_once_per_request_and_only_the_tenants_own(
    gateway: RunningGateway,
) -> None:
    answer = ask(gateway, "What is the capital of France?").parse()
    rid = answer.id
    before = len(labels(gateway))
    stranger = verdict(gateway, {"request_id": rid, "verdict": "bad"}, key=OTHER_KEY)
    unknown = verdict(gateway, {"request_id": "chatcmpl-nobody", "verdict": "bad"})
    for refused in (stranger, unknown):  # another tenant's id reads exactly like no id
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["code"] == "request_not_found"
        assert refused.json()["error"]["param"] == "request_id"
    assert stranger.json()["error"]["message"].replace(rid, "X") == unknown.json()["error"][
        "message"
    ].replace("chatcmpl-nobody", "X")
    for body, param in (
        ({"request_id": rid, "verdict": "meh"}, "verdict"),
        ({"request_id": rid, "verdict": "bad", "comment": "no"}, "comment"),
        ({"verdict": "bad"}, "request_id"),
    ):
        bad = verdict(gateway, body)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, bad.text
    assert len([x for x in labels(gateway) if x.source == "client"]) == 0  # nothing changed
    first = verdict(gateway, {"request_id": rid, "verdict": "bad"})
    assert first.status_code == 200, first.text
    served = first.json()
    assert served["labelled_tier"] is not None and served["cache_evicted"] is False
    again = verdict(gateway, {"request_id": rid, "verdict": "bad"})
    assert again.status_code == 200 and again.json()["labelled_tier"] is None  # a no-op
    other = verdict(gateway, {"request_id": rid, "verdict": "good"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "verdict_conflict"
    client = [x for x in labels(gateway) if x.source == "client"]
    assert [(x.request_id, x.tier, x.acceptable) for x in client] == [
        (rid, served["labelled_tier"], False)
    ]
    assert client[0].vector is not None and client[0].features is not None
    assert len(labels(gateway)) >= before + 1


def test_a_cached_answers_verdict_is_the_caches_not_a_routing_label(
    gateway: RunningGateway,
) -> None:
    prompt = "What is the capital of France?"
    ask(gateway, prompt, temperature=0)
    hit = ask(gateway, prompt, temperature=0)
    assert hit.headers["x-tiergate-cache"] == "exact"
    got = verdict(gateway, {"request_id": hit.parse().id, "verdict": "bad"})
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["cache"] == "exact" and body["labelled_tier"] is None
    assert body["cache_evicted"] is True  # tests/gateway/feedback/test_feedback_cache.py: on Redis
    record = gateway.call(gateway.state.parts.feedback.record(hit.parse().id))  # type: ignore[union-attr]
    assert record.query_text == prompt and record.cache == "exact"
    assert record.entry_id is not None
    assert ask(gateway, prompt, temperature=0).headers["x-tiergate-cache"] == "miss"


def test_shadows_are_dropped_under_load_and_never_delay_an_answer(tmp_path: Path) -> None:
    config = feedback_config(tmp_path, max_concurrent=1)
    for engine in ("fake-small", "fake-medium", "fake-large"):  # the shadow may be any tier
        config["engines"][engine]["options"] = {"tokens": 8, "token_delay_s": 0.1}
    with running_gateway(config) as gateway:
        feedback = gateway.state.parts.feedback
        assert feedback is not None

        async def burst() -> list[float]:
            async with httpx.AsyncClient(timeout=60) as client:

                async def one() -> float:
                    started = time.perf_counter()
                    body = {"model": "small", "messages": [{"role": "user", "content": SLOW}]}
                    got = await client.post(
                        gateway.base_url + "/v1/chat/completions",
                        json={**body, "model": "auto"},
                        headers={"authorization": f"Bearer {TEST_KEY}"},
                    )
                    assert got.status_code == 200, got.text
                    return time.perf_counter() - started

                return list(await asyncio.gather(*(one() for _ in range(6))))

        asyncio.run(burst())
        counts = feedback.counts()
        assert counts["sampled"] == 6
        assert counts["in_flight"] == 1  # the one admitted shadow still runs (0.8 s) ...
        assert counts["dropped_busy"] == 5  # ... and the others were dropped, not queued
        wait_for(lambda: feedback.counts()["shadow_labelled"] == 1)
        assert feedback.counts()["in_flight"] == 0
