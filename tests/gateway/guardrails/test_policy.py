"""The ``guardrails:`` block: validation, per-key override, lists, and one request's redactor."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.guardrails.errors import GuardrailBlocked
from gateway.guardrails.guard import restore
from gateway.guardrails.policy import compile_policy, policy_for
from gateway.guardrails.redactor import Redactor
from policies.guardrails_spec import GuardrailsSpec
from policies.schema import GatewayConfig
from policies.tenants import KeyRing
from tiergate_testing.configs import TEST_KEY, fake_config


def config_with(tenant_block: dict[str, Any] | None, key_block: dict[str, Any] | None = None):
    raw = fake_config()
    acme = raw["tenants"]["acme"]
    if tenant_block is not None:
        acme["guardrails"] = tenant_block
    if key_block is not None:
        acme["keys"] = [{**acme["keys"][0], "guardrails": key_block}]
    return GatewayConfig.model_validate(raw)


def test_block_validates_and_names_the_field() -> None:
    config = config_with({"detectors": {"email": "redact", "card": "block"}, "restore": True})
    spec = config.tenants["acme"].guardrails
    assert spec is not None and spec.detectors["card"] == "block"
    with pytest.raises(ValidationError, match=r"guardrails\.detectors\.email"):
        config_with({"detectors": {"email": "mask"}})
    with pytest.raises(ValidationError, match="detectors"):
        config_with({"detectors": {"passport": "redact"}})
    with pytest.raises(ValidationError, match="window_chars"):
        config_with({"detectors": {"email": "redact"}, "window_chars": 8})
    with pytest.raises(ValidationError, match=r"give detectors\.deny an action"):
        config_with({"detectors": {"email": "redact"}, "deny": ["Falcon"]})
    with pytest.raises(ValidationError, match="restore needs a detector"):
        config_with({"detectors": {"email": "block"}, "restore": True})


def test_ner_without_its_extra_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)  # as if not installed
    with pytest.raises(ValidationError, match=r"tenants.acme.guardrails asks for person"):
        config_with({"detectors": {"person": "redact"}})


def test_a_keys_block_replaces_its_tenants(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERGATE_TEST_KEY", TEST_KEY)
    config = config_with({"detectors": {"email": "redact"}}, {"detectors": {"card": "block"}})
    principal = KeyRing.from_config(config).authenticate(TEST_KEY)
    assert principal is not None
    policy = policy_for(principal)
    assert policy is not None and policy.actions == {"CARD": "block"}
    assert policy_for(principal) is policy  # compiled once per block
    plain = GatewayConfig.model_validate(fake_config())
    other = KeyRing.from_config(plain).authenticate(TEST_KEY)
    assert other is not None and policy_for(other) is None


def redactor(**block: Any) -> Redactor:
    return Redactor(compile_policy(GuardrailsSpec.model_validate(block)))


def test_placeholders_are_typed_and_stable_within_a_request() -> None:
    r = redactor(detectors={"email": "redact", "phone": "redact"})
    first = r.text("mail a@example.com or b@example.com, call +1 415 555 2671")
    second = r.text("again: b@example.com")
    assert first == "mail <EMAIL_1> or <EMAIL_2>, call <PHONE_1>"
    assert second == "again: <EMAIL_2>"
    restored = restore(r.values, "write to <EMAIL_2> and <EMAIL_9>")
    assert restored == "write to b@example.com and <EMAIL_9>"
    assert r.counts[("EMAIL", "redact")] == 3


def test_actions_block_local_log() -> None:
    r = redactor(detectors={"card": "block", "ssn": "local", "ip": "log"})
    assert r.text("ssn 123-45-6789 from 10.1.2.3") == "ssn 123-45-6789 from 10.1.2.3"
    assert r.local and r.counts[("IP", "log")] == 1
    with pytest.raises(GuardrailBlocked) as raised:
        r.text("card 4111 1111 1111 1111", "messages[0].content")
    error = raised.value
    assert error.status == 400 and error.code == "guardrail_blocked"
    assert error.param == "messages[0].content" and "'card'" in error.message
    assert "4111" not in error.message


def test_allow_and_deny_lists() -> None:
    r = redactor(
        detectors={"email": "redact", "deny": "redact"},
        allow=["Support@Acme.example"],
        deny=["Project Falcon"],
    )
    text = "support@acme.example says project falcon ships; ask bob@acme.example"
    assert r.text(text) == "support@acme.example says <DENY_1> ships; ask <EMAIL_1>"
    assert r.text("falconry is fine") == "falconry is fine"


def test_walk_redacts_text_and_leaves_ids_and_media() -> None:
    r = redactor(detectors={"email": "redact"})
    messages = (
        {"role": "user", "content": [{"type": "text", "text": "I am a@example.com"}]},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_a@example.com",
                    "type": "function",
                    "function": {"name": "send", "arguments": '{"to": "a@example.com"}'},
                }
            ],
        },
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x@y.example"}}]},
    )
    walked = r.walk(messages, "messages")
    assert walked[0]["content"][0]["text"] == "I am <EMAIL_1>"
    call = walked[1]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"to": "<EMAIL_1>"}'
    assert call["id"] == "call_a@example.com"
    assert walked[2] == messages[2]
    assert messages[0]["content"][0]["text"] == "I am a@example.com"  # not changed in place
