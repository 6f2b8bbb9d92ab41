"""The judge: its written rubric and the reading of its verdict, and the model judge for
real — a configured model behind the ``openai`` backend (the fake OpenAI upstream on
loopback) answers the rubric through a real gateway; a clear verdict becomes a label, an
unparsable one becomes none."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.learning.judges import ModelJudge
from routers.judge_prompt import (
    PART_CHARS,
    SHIPPED_RUBRIC,
    judge_messages,
    load_rubric,
    parse_verdict,
)
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.profiles import Profile
from tiergate_testing.upstream import Upstream, running_upstream

QUESTION = "What is 17 * 24? Show the multiplication."
SAYS_NO = Profile(words=("VERDICT: NOT ACCEPTABLE", "\n", "REASON: the product is wrong"))
SAYS_YES = Profile(words=("**VERDICT:", " ACCEPTABLE**", "\n"))
BABBLES = Profile(words=("Both", " answers", " look", " fine", " to", " me", " overall", "."))
HEDGES = Profile(words=("VERDICT: ACCEPTABLE", "\n", "VERDICT: NOT ACCEPTABLE"))


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("VERDICT: ACCEPTABLE", True),
        ("verdict: not acceptable.\nREASON: misses the second part", False),
        ("**VERDICT: ACCEPTABLE**\nREASON: same result", True),
        ("`VERDICT: NOT ACCEPTABLE`", False),
        ("I think A is acceptable.", None),  # no verdict line
        ("VERDICT: ACCEPTABLE\nVERDICT: NOT ACCEPTABLE", None),  # contradicts itself
        ("VERDICT: MOSTLY ACCEPTABLE", None),
        ("VERDICT: ACCEPTABLE, although B is better", None),  # a hedge is no verdict
        ("", None),
    ],
)
def test_parse_verdict(reply: str, expected: bool | None) -> None:
    verdict = parse_verdict(reply)
    assert (None if verdict is None else verdict.acceptable) is expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("VERDICT A: ACCEPTABLE\nVERDICT B: NOT ACCEPTABLE", (True, False)),
        ("**Verdict A: not acceptable**\n`VERDICT B: ACCEPTABLE`\nREASON: A is off", (False, True)),
        ("VERDICT: NOT ACCEPTABLE", (False, None)),  # A's only: only A is labelled
        ("VERDICT B: ACCEPTABLE", None),  # nothing on A
        ("VERDICT A: ACCEPTABLE\nVERDICT B: ACCEPTABLE\nVERDICT B: NOT ACCEPTABLE", None),
        ("VERDICT A: ACCEPTABLE\nVERDICT B: BETTER", (True, None)),  # B's hedge: no B line
    ],
)
def test_parse_both_verdicts(reply: str, expected: tuple[bool, bool | None] | None) -> None:
    verdict = parse_verdict(reply)
    got = None if verdict is None else (verdict.acceptable, verdict.reference_acceptable)
    assert got == expected


def test_the_reason_is_kept_and_the_prompt_carries_the_rubric() -> None:
    verdict = parse_verdict("VERDICT: NOT ACCEPTABLE\nREASON: wrong total")
    assert verdict is not None and verdict.reason == "wrong total"
    rubric = load_rubric(None)
    assert rubric == SHIPPED_RUBRIC.read_text() and "VERDICT B: NOT ACCEPTABLE" in rubric
    long = "x" * (PART_CHARS + 500)
    system, user = judge_messages(rubric, [{"role": "user", "content": QUESTION}], long, "408")
    assert system == {"role": "system", "content": rubric}
    text = user["content"]
    assert (
        QUESTION in text and "ANSWER A (cheaper model):" in text and text.count("x") == PART_CHARS
    )
    assert text.index("ANSWER A") < text.index("ANSWER B (more capable model):\n408")


def judge_config(upstream: str) -> dict[str, Any]:
    """small: the fake engine; large: four models behind the ``openai`` backend, each with
    a fixed reply; ``judge.model`` names the one that judges (its request is pinned to it)."""
    config = fake_config()
    up = {"api_base": upstream, "api_key": "unused"}
    replies = {"judge-no": "says-no", "judge-yes": "says-yes"}
    replies |= {"judge-babble": "babbles", "judge-hedge": "hedges"}
    config["engines"] = {"fake-small": config["engines"]["fake-small"]}
    for name, upstream_model in replies.items():
        options = {**up, "upstream_model": upstream_model}
        config["engines"][name] = {"backend": "openai", "model": name, "options": options}
    config["tiers"] = {
        "small": {"engines": ["fake-small"]},
        "large": {"engines": ["judge-no", "judge-yes", "judge-babble", "judge-hedge"]},
    }
    config["prices"] = {name: {"input": 1.0, "output": 2.0} for name in config["engines"]}
    config["routing"] = {
        "classifier": {"max_wait_ms": 1},
        "feedback": {"sample": 1.0, "judge": {"model": "judge-no"}, "record_flush_s": 0.05},
    }
    return config


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    profiles = {"says-no": SAYS_NO, "says-yes": SAYS_YES, "babbles": BABBLES, "hedges": HEDGES}
    with running_upstream(profiles, keep_bodies=True) as running:
        yield running


def judged_once(upstream: Upstream, judge_model: str) -> tuple[RunningGateway, Any, str]:
    """One ``auto`` request through a gateway whose judge is ``judge_model``; the label
    list once the shadow pair has ended, and the request id."""
    config = judge_config(upstream.base_url)
    config["routing"]["feedback"]["judge"] = {"model": judge_model}
    with running_gateway(config) as gateway:
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
        answer = client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": QUESTION}], max_tokens=8
        )
        feedback = gateway.state.parts.feedback
        assert feedback is not None and isinstance(feedback.judge, ModelJudge)
        deadline = time.monotonic() + 30
        while feedback.counts()["shadow_run"] == 0 or feedback.counts()["in_flight"]:
            assert time.monotonic() < deadline, feedback.counts()
            time.sleep(0.05)
        labels = gateway.call(feedback.store.labels())
        return gateway, (labels, feedback.counts()), answer.id


def test_a_model_judge_answers_the_rubric_and_its_verdict_is_the_label(upstream: Upstream) -> None:
    before = len(upstream.stats.bodies)
    _, (labels, counts), rid = judged_once(upstream, "judge-no")
    (label,) = labels
    assert label.request_id == rid and label.source == "judge"
    assert (label.tier, label.reference_tier, label.acceptable) == ("small", "large", False)
    assert counts["judge"] == {"answered": 1, "unparsed": 0}
    sent = [b for b in upstream.stats.bodies[before:] if b.get("model") == "says-no"]
    judge_bodies = [b for b in sent if b["messages"][0]["role"] == "system"]  # type: ignore[index]
    (body,) = judge_bodies
    messages: Any = body["messages"]
    assert messages[0]["content"] == load_rubric(None)  # the written rubric, as the system turn
    assert QUESTION in messages[1]["content"] and body["temperature"] == 0.0
    assert body["max_tokens"] == 96  # judge.max_tokens
    _, (yes, _), _ = judged_once(upstream, "judge-yes")
    assert [x.acceptable for x in yes] == [True]


@pytest.mark.parametrize("judge_model", ["judge-babble", "judge-hedge"])
def test_an_unparsable_verdict_makes_no_label(upstream: Upstream, judge_model: str) -> None:
    _, (labels, counts), _ = judged_once(upstream, judge_model)
    assert labels == []
    assert counts["judge"] == {"answered": 1, "unparsed": 1}
    assert counts["shadow_run"] == 1 and counts["shadow_labelled"] == 0
