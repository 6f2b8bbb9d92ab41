"""The guard in the serving core, end to end (uvicorn, the official clients, real Redis):
redact before the engine and every store, block with nothing charged, keep local."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.gateway.guardrails.guarded_support import (
    ADMIN_KEY,
    CARD,
    EMAIL,
    IBAN,
    KEY,
    OPEN_KEY,
    PLANTED,
    RESTORE_KEY,
    SSN,
    Guarded,
    guarded_gateway,
)
from tiergate_testing.configs import TEST_KEY

ASK = f"Please e-mail {EMAIL} that card {CARD} is charged; my key is {KEY}."


@pytest.fixture(scope="module")
def guarded() -> Iterator[Guarded]:
    with guarded_gateway() as running:
        yield running


def sent(guarded: Guarded, since: int) -> str:
    return json.dumps(guarded.bodies[since:])


def test_every_family_sends_placeholders_never_the_values(guarded: Guarded) -> None:
    since = len(guarded.bodies)
    chat = guarded.chat()
    reply = chat.chat.completions.create(
        model="large",
        messages=[{"role": "user", "content": ASK}],
        temperature=0,
        metadata={"customer": EMAIL},
    )
    assert reply.choices[0].message.content == "Noted: I will write to <EMAIL_1> soon."
    # each its own prompt: the same one would be the exact cache's hit
    chat.completions.create(model="large", prompt=ASK + " (1)", temperature=0, max_tokens=8)
    chat.responses.create(model="large", input=ASK + " (2)", temperature=0, store=True)
    guarded.messages().messages.create(
        model="large", max_tokens=16, messages=[{"role": "user", "content": ASK + " (3)"}]
    )
    upstream = sent(guarded, since)
    assert len(guarded.bodies) - since == 4
    for value in PLANTED:
        assert value not in upstream
    assert "<EMAIL_1>" in upstream and "<CARD_1>" in upstream and "<SECRET_1>" in upstream


def test_restore_gives_the_caller_its_values_back_and_keeps_placeholders(
    guarded: Guarded,
) -> None:
    since = len(guarded.bodies)
    chat = guarded.chat(RESTORE_KEY)
    reply = chat.chat.completions.create(
        model="large", messages=[{"role": "user", "content": ASK}], temperature=0
    )
    assert reply.choices[0].message.content == f"Noted: I will write to {EMAIL} soon."
    stored = chat.responses.create(model="large", input=ASK, store=True, temperature=0)
    assert stored.output_text == f"Noted: I will write to {EMAIL} soon."
    kept = chat.responses.retrieve(stored.id)  # what the store holds: the placeholders
    assert kept.output_text == "Noted: I will write to <EMAIL_1> soon."
    assert EMAIL not in sent(guarded, since)
    # the key with its own block: no e-mail rule, so the value goes as sent
    other = "other.person@example.org"
    plain = guarded.chat(OPEN_KEY)
    plain.chat.completions.create(model="large", messages=[{"role": "user", "content": other}])
    assert other in sent(guarded, since)


def test_block_is_a_400_naming_the_rule_with_nothing_sent_or_charged(guarded: Guarded) -> None:
    since = len(guarded.bodies)
    chat = guarded.chat()
    with pytest.raises(openai.BadRequestError) as raised:
        chat.chat.completions.create(
            model="large", messages=[{"role": "user", "content": f"wire it to {IBAN}"}]
        )
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "guardrail_blocked" and "'iban'" in error["message"]
    assert IBAN not in json.dumps(error)
    with pytest.raises(openai.BadRequestError) as again:
        chat.responses.create(model="large", input=f"IBAN {IBAN}")
    assert again.value.code == "guardrail_blocked"
    with pytest.raises(anthropic.BadRequestError) as shaped:
        guarded.messages().messages.create(
            model="large", max_tokens=8, messages=[{"role": "user", "content": IBAN}]
        )
    body = shaped.value.body
    assert isinstance(body, dict) and body["type"] == "error"  # Anthropic's shape
    assert len(guarded.bodies) == since
    assert IBAN not in guarded.redis_text()


def test_local_keeps_the_prompt_off_the_remote_tier(guarded: Guarded) -> None:
    since = len(guarded.bodies)
    chat = guarded.chat()
    raw = chat.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": f"my SSN is {SSN}"}]
    )
    assert raw.headers["x-tiergate-tier"] == "small"  # moved off the remote default
    assert raw.parse().choices[0].message.content
    with pytest.raises(openai.BadRequestError) as named:
        chat.chat.completions.create(
            model="large", messages=[{"role": "user", "content": f"my SSN is {SSN}"}]
        )
    assert named.value.code == "guardrail_no_local_tier"
    with pytest.raises(openai.BadRequestError) as forced:
        chat.with_options(default_headers={"x-tiergate-tier": "large"}).responses.create(
            model="auto", input=f"SSN {SSN}"
        )
    assert forced.value.code == "guardrail_no_local_tier"
    assert len(guarded.bodies) == since  # the remote upstream never heard of it


def test_nothing_unredacted_is_kept_in_redis(guarded: Guarded) -> None:
    # every request above ran with the planted values; the exact and the semantic cache,
    # the stored Responses, the ledger, the money: none holds one (the ``local`` SSN ran
    # on the local tier)
    kept = guarded.redis_text()
    assert guarded.prefix in kept  # the scan saw the gateway's keys
    keys = [k for k in kept.splitlines() if k.startswith(guarded.prefix)]
    assert any(":cache:{acme}:e:" in k for k in keys)  # the cache's entries
    assert any(k.endswith(":cache:events") for k in keys)  # the semantic index's stream
    assert any(":responses:resp_" in k for k in keys)  # stored Responses
    assert any(k.endswith("{ledger}:events") for k in keys)  # the ledger
    for value in (CARD, EMAIL, KEY, IBAN, "4111111111111111"):
        assert value not in kept, value
    assert "<EMAIL_1>" in kept


def test_metrics_count_kinds_and_actions_never_values(guarded: Guarded) -> None:
    text = httpx.get(guarded.gateway.base_url + "/metrics", timeout=10).text
    found = [line for line in text.splitlines() if line.startswith("tiergate_guardrail_detections")]
    assert any('type="EMAIL"' in line and 'action="redact"' in line for line in found)
    assert any('type="IBAN"' in line and 'action="block"' in line for line in found)
    assert any('type="SSN"' in line and 'action="local"' in line for line in found)
    assert "tiergate_guardrail_screen_seconds_count" in text
    for value in PLANTED:
        assert value not in text
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    shown = httpx.get(guarded.gateway.base_url + "/admin/api/guardrails", headers=admin)
    assert shown.status_code == 200, shown.text
    body = shown.json()
    rows = {
        (r["tenant"], r["type"], r["action"], r["side"]): r["count"] for r in body["detections"]
    }
    assert rows[("acme", "IBAN", "block", "request")] >= 3
    assert rows[("acme", "EMAIL", "redact", "request")] >= 4
    assert body["screens"] > 0 and body["screen_mean_us"] > 0
    assert body["guarded_tenants"] == ["acme", "blocker", "restorer"]
    for value in PLANTED:
        assert value not in shown.text
    assert httpx.get(guarded.gateway.base_url + "/admin/api/guardrails").status_code == 401


def test_a_tenant_made_through_the_admin_api_has_its_guardrails(guarded: Guarded) -> None:
    admin = httpx.Client(
        base_url=guarded.gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
    )
    made = admin.post(
        "/admin/api/tenants",
        json={
            "name": "runtime",
            "default_tier": "large",
            "guardrails": {"detectors": {"email": "redact", "iban": "block"}},
        },
    )
    assert made.status_code == 201, made.text
    bad = admin.post(
        "/admin/api/tenants", json={"name": "bad", "guardrails": {"detectors": {"x": "y"}}}
    )
    assert bad.status_code == 400
    issued = admin.post("/admin/api/keys", json={"tenant": "runtime"})
    assert issued.status_code == 201, issued.text
    client = guarded.chat(issued.json()["key"])
    since = len(guarded.bodies)
    client.chat.completions.create(
        model="large", messages=[{"role": "user", "content": f"write to {EMAIL}"}]
    )
    assert EMAIL not in sent(guarded, since) and "<EMAIL_1>" in sent(guarded, since)
    with pytest.raises(openai.BadRequestError) as blocked:
        client.chat.completions.create(model="large", messages=[{"role": "user", "content": IBAN}])
    assert blocked.value.code == "guardrail_blocked"
    admin.close()


def test_route_explains_what_the_request_would_meet(guarded: Guarded) -> None:
    auth = {"authorization": f"Bearer {TEST_KEY}"}
    url = guarded.gateway.base_url + "/v1/route"
    local = httpx.post(
        url, json={"messages": [{"role": "user", "content": f"SSN {SSN}"}]}, headers=auth
    )
    assert local.status_code == 200 and local.json()["tier"] == "small"
    blocked = httpx.post(url, json={"messages": [{"role": "user", "content": IBAN}]}, headers=auth)
    assert blocked.status_code == 400 and blocked.json()["error"]["code"] == "guardrail_blocked"


def test_a_cache_hit_stored_by_an_unguarded_key_goes_through_the_window(
    guarded: Guarded,
) -> None:
    # runs last: the unguarded key's answer (a card, an e-mail, a key) is cached raw
    ask = [{"role": "user", "content": "What is on file? (cache)"}]
    raw = guarded.chat(OPEN_KEY).chat.completions.create(model="cut7", messages=ask, temperature=0)
    assert CARD in (raw.choices[0].message.content or "")  # that key's block has no card rule
    hit = guarded.chat(RESTORE_KEY).chat.completions.with_raw_response.create(
        model="cut7", messages=ask, temperature=0
    )
    assert hit.headers["x-tiergate-cache"] == "exact"
    text = hit.parse().choices[0].message.content or ""
    assert CARD not in text and EMAIL not in text and "<CARD_1>" in text
