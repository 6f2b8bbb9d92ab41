"""Names and places through Presidio and spaCy (the ``guard-ner`` extra, in dev): redacted
in the request before the upstream sees it, and in a streamed answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.guardrails.policy import compile_policy
from gateway.guardrails.redactor import Redactor
from policies.guardrails_spec import GuardrailsSpec
from tests.gateway.budget_support import redis_prefix
from tests.gateway.guardrails.guarded_support import Guarded, guarded_config
from tiergate_testing.gateways import running_gateway
from tiergate_testing.profiles import Profile
from tiergate_testing.upstream import running_upstream

pytest.importorskip("presidio_analyzer")
NER = {"detectors": {"person": "redact", "location": "redact", "email": "redact"}}


def test_names_and_places_are_redacted_with_the_deterministic_values() -> None:
    redactor = Redactor(compile_policy(GuardrailsSpec.model_validate(NER)))
    text = redactor.text("John Smith from London wrote to jane@example.com about Paris.")
    assert text == "<PERSON_1> from <LOCATION_1> wrote to <EMAIL_1> about <LOCATION_2>."
    plain = "Can you help me write a polite note about the broken heater?"
    assert redactor.text(plain) == plain


@pytest.fixture(scope="module")
def guarded() -> Iterator[Guarded]:
    pieces = ("I have ", "asked Maria ", "Gonzal", "ez to call ", "you back today. ", "Bye.")
    told, ok = Profile(words=pieces), Profile(words=("Done.",))
    with redis_prefix() as prefix, running_upstream({"told": told}, default=ok) as upstream:
        config = guarded_config(upstream, prefix)
        config["engines"]["told"] = {
            "backend": "openai",
            "model": "told",
            "options": {"api_base": upstream.base_url},
        }
        config["tiers"]["told"] = {"engines": ["told"]}
        config["prices"]["told"] = {"input": 1.0, "output": 1.0}
        config["tenants"]["acme"]["guardrails"] = NER
        with running_gateway(config) as gateway:
            yield Guarded(gateway, upstream, prefix)


def test_a_request_and_a_streamed_answer_through_the_gateway(guarded: Guarded) -> None:
    client = guarded.chat()
    client.chat.completions.create(
        model="large",
        messages=[{"role": "user", "content": "Please tell Angela Merkel in Berlin hello."}],
    )
    sent = str(guarded.bodies[-1])
    assert "Angela Merkel" not in sent and "Berlin" not in sent and "<PERSON_1>" in sent
    stream = client.chat.completions.create(
        model="told", messages=[{"role": "user", "content": "any news?"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert "Maria" not in text and "Gonzal" not in text
    assert text.startswith("I have asked <PERSON_1>")
