"""Guardrails with ``escalation`` (the cheap tier answers first, held, then kept or
re-asked): a kept cheap answer still goes through the answer's window, and a ``local``
request never makes its cheap attempt on a remote tier."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.gateway.guardrails.guarded_support import SSN
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.upstream import Upstream, running_upstream

EASY = "Say hi."


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[RunningGateway, Upstream]]:
    with running_upstream() as upstream:
        raw: dict[str, Any] = fake_config()
        raw["engines"]["remote"] = {
            "backend": "openai",
            "model": "up-m",
            "logprobs": True,
            "options": {"api_base": upstream.base_url},
        }
        raw["tiers"] = {
            "small": {"engines": ["remote"]},  # the cheap attempt's tier is remote
            "medium": {"engines": ["fake-medium"]},
            "large": {"engines": ["fake-large"]},
        }
        raw["prices"]["up-m"] = {"input": 0.1, "output": 0.2}
        acme = raw["tenants"]["acme"]
        acme["escalation"] = {"mode": "always"}
        acme["guardrails"] = {"detectors": {"ssn": "local"}}
        globex = raw["tenants"]["globex"]
        globex["escalation"] = {"mode": "always"}
        # the deny list names a word of the upstream's answer ("Hello from the upstream
        # server."): a kept cheap answer must come through the window redacted
        globex["guardrails"] = {"detectors": {"deny": "redact"}, "deny": ["upstream"]}
        with running_gateway(raw) as gateway:
            yield gateway, upstream


def test_a_local_request_skips_a_remote_cheap_attempt(
    served: tuple[RunningGateway, Upstream],
) -> None:
    gateway, upstream = served
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    before = len(upstream.stats.bodies)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": f"my SSN is {SSN}"}], max_tokens=8
    )
    assert raw.headers["x-tiergate-tier"] in ("medium", "large")
    assert len(upstream.stats.bodies) == before  # the remote cheap tier heard nothing
    client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "no value here"}], max_tokens=8
    )
    assert len(upstream.stats.bodies) == before + 1  # the plain one did try it


def test_a_kept_cheap_answer_goes_through_the_window(
    served: tuple[RunningGateway, Upstream],
) -> None:
    gateway, _ = served
    key = os.environ["TIERGATE_OTHER_KEY"]
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": EASY}], max_tokens=8
    )
    assert raw.headers["x-tiergate-escalated"] == "false"  # the cheap answer was kept
    assert raw.parse().choices[0].message.content == "Hello from the <DENY_1> server."
