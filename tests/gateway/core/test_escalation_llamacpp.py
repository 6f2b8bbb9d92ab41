"""Escalation on a real engine (SmolLM2-135M on llama.cpp, every tier the same model): the
signal the gateway judged the cheap answer by is the one a client computes from the
log-probabilities it gets back, and an escalated answer is the next tier's own."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest

from tiergate_testing.configs import OTHER_KEY, TEST_KEY, smollm2_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    raw = smollm2_config(replicas=1)
    # acme keeps every cheap answer, globex re-asks every one (no answer reaches q10 = 0)
    raw["tenants"]["acme"]["escalation"] = {"mode": "always", "threshold": -50.0}
    raw["tenants"]["globex"]["escalation"] = {"mode": "always", "threshold": 0.0}
    with running_gateway(raw) as running:
        yield running


def client(gateway: RunningGateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)


def test_the_judged_signal_is_the_clients_q10(gateway: RunningGateway) -> None:
    raw = client(gateway, TEST_KEY).chat.completions.with_raw_response.create(
        model="auto",
        messages=ASK,
        max_tokens=16,
        temperature=0,
        logprobs=True,  # type: ignore[arg-type]
    )
    answer, headers = raw.parse(), raw.headers
    assert headers["x-tiergate-escalated"] == "false" and headers["x-tiergate-tier"] == "small"
    content = answer.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content and answer.usage is not None
    assert len(content) == answer.usage.completion_tokens
    seen = float(np.quantile([entry.logprob for entry in content], 0.1))
    judged = float(headers["x-tiergate-escalation-signal"])
    assert judged == pytest.approx(seen, abs=1e-4)
    print(f"\nq10 judged {judged:.4f}, from the client's logprobs {seen:.4f}")


def test_an_escalated_answer_is_the_next_tiers_own(gateway: RunningGateway) -> None:
    other = client(gateway, OTHER_KEY)
    raw = other.chat.completions.with_raw_response.create(
        model="auto",
        messages=ASK,
        max_tokens=16,
        temperature=0,  # type: ignore[arg-type]
    )
    answer, headers = raw.parse(), raw.headers
    assert headers["x-tiergate-escalated"] == "true" and headers["x-tiergate-tier"] == "medium"
    assert float(headers["x-tiergate-escalation-signal"]) < 0
    assert answer.choices[0].logprobs is None  # the judge's, never the client's
    direct = other.chat.completions.create(
        model="medium",
        messages=ASK,
        max_tokens=16,
        temperature=0,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content == direct.choices[0].message.content
    # both attempts charged: twice the one model's price for the same answer, give or take
    # the cheap attempt's own length
    assert float(headers["x-tiergate-cost-usd"]) > 0


def test_a_json_answer_is_not_escalated(gateway: RunningGateway) -> None:
    shown = httpx.post(
        gateway.base_url + "/v1/route",
        json={"messages": ASK, "response_format": {"type": "json_object"}},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    ).json()
    assert shown["escalation"] is None
    assert "escalation: not for a response_format" in shown["trail"]
