"""A detector that fails closes the request (503 guardrail_unavailable, nothing sent)
unless its tenant says ``fail_open``; a policy reload changes the guard for the next
request."""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from gateway.guardrails import ner
from policies.loader import load_config
from tests.gateway.guardrails.guarded_support import EMAIL, guarded_config
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import running_gateway
from tiergate_testing.upstream import running_upstream

ADMIN_KEY = "tg-admin-key-for-guard-tests"
OPEN_KEY = "tg-guard-fail-open-key-03"


class BrokenAnalyzer:
    """Presidio's ``AnalyzerEngine`` as it is when its spaCy model cannot run."""

    def __init__(self, **_: Any) -> None:
        pass

    def analyze(self, **_: Any) -> list[object]:
        raise RuntimeError("E050: can't find model 'en_core_web_sm'")


class Provider:
    def __init__(self, **_: Any) -> None:
        pass

    def create_engine(self) -> object:
        return object()


@pytest.fixture
def broken_presidio(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for the ``presidio_analyzer`` package whose analyzer always fails."""
    package = types.ModuleType("presidio_analyzer")
    package.__spec__ = importlib.machinery.ModuleSpec("presidio_analyzer", None)
    package.AnalyzerEngine = BrokenAnalyzer  # type: ignore[attr-defined]
    engines = types.ModuleType("presidio_analyzer.nlp_engine")
    engines.NlpEngineProvider = Provider  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "presidio_analyzer", package)
    monkeypatch.setitem(sys.modules, "presidio_analyzer.nlp_engine", engines)
    monkeypatch.setattr(ner, "_analyzer", None)


def test_a_failing_detector_fails_closed_unless_told_to_open(broken_presidio: None) -> None:
    os.environ["TIERGATE_GUARD_OPEN_KEY"] = OPEN_KEY
    with running_upstream() as upstream:
        config = guarded_config(upstream, "unused")
        del config["redis_url"], config["redis_prefix"], config["cache"]
        person = {"detectors": {"person": "redact", "email": "redact"}}
        config["tenants"]["acme"]["guardrails"] = person
        config["tenants"]["opener"] = {
            "keys": [{"id": "o-1", "from_env": "TIERGATE_GUARD_OPEN_KEY"}],
            "default_tier": "large",
            "guardrails": {**person, "fail_open": True},
        }
        with running_gateway(config) as gateway:
            client = openai.OpenAI(
                base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0
            )
            ask = [{"role": "user", "content": f"Tell John Smith at {EMAIL} hello"}]
            with pytest.raises(openai.InternalServerError) as raised:
                client.chat.completions.create(model="large", messages=ask)
            assert raised.value.status_code == 503
            assert raised.value.code == "guardrail_unavailable"
            with pytest.raises(openai.InternalServerError):
                client.responses.create(model="large", input=ask[0]["content"])
            assert upstream.stats.bodies == []  # nothing left the gateway
            opener = client.with_options(api_key=OPEN_KEY)
            reply = opener.chat.completions.create(model="large", messages=ask)
            assert reply.choices[0].message.content  # let through, as that tenant chose
            assert len(upstream.stats.bodies) == 1


@pytest.fixture
def reloadable(tmp_path: Path) -> Iterator[tuple[str, Path, list[dict[str, object]]]]:
    os.environ["TIERGATE_GUARD_ADMIN_KEY"] = ADMIN_KEY
    with running_upstream() as upstream:
        config = guarded_config(upstream, "unused")
        del config["redis_url"], config["redis_prefix"], config["cache"]
        config["admin"] = {"key_from_env": "TIERGATE_GUARD_ADMIN_KEY"}
        del config["tenants"]["acme"]["guardrails"]
        path = tmp_path / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        with running_gateway(load_config(path), lambda: load_config(path)) as gateway:
            yield gateway.base_url, path, upstream.stats.bodies


def test_a_reload_turns_the_guard_on_for_the_next_request(
    reloadable: tuple[str, Path, list[dict[str, object]]],
) -> None:
    base_url, path, bodies = reloadable
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    ask = [{"role": "user", "content": f"write to {EMAIL}"}]
    client.chat.completions.create(model="large", messages=ask)
    assert EMAIL in str(bodies[-1])  # no guardrails yet
    config = yaml.safe_load(path.read_text())
    config["tenants"]["acme"]["guardrails"] = {"detectors": {"email": "redact"}}
    path.write_text(yaml.safe_dump(config))
    reloaded = httpx.post(
        base_url + "/admin/api/policies/reload",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    )
    assert reloaded.status_code == 200, reloaded.text
    client.chat.completions.create(model="large", messages=ask)
    assert EMAIL not in str(bodies[-1]) and "<EMAIL_1>" in str(bodies[-1])
    # a block the loader refuses leaves the running policy as it was
    config["tenants"]["acme"]["guardrails"] = {"detectors": {"email": "scramble"}}
    path.write_text(yaml.safe_dump(config))
    refused = httpx.post(
        base_url + "/admin/api/policies/reload",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    )
    assert refused.status_code >= 400 and "detectors" in refused.text
    client.chat.completions.create(model="large", messages=ask)
    assert EMAIL not in str(bodies[-1])
