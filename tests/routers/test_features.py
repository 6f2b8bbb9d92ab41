"""The text features see what the embedding does not: code requests, answer choices."""

from __future__ import annotations

import math

from routers.features import DOMAIN_LENGTHS, FEATURES, prompt_messages, text_features


def features(text: str) -> dict[str, float]:
    row = text_features(prompt_messages(text), text)
    return dict(zip(FEATURES, (float(v) for v in row), strict=True))


def test_a_request_for_code_is_a_code_task_with_its_own_length() -> None:
    ask = features("Write a python function to find the longest common prefix of a list.")
    assert ask["code_task"] == 1.0
    assert math.isclose(ask["code_log_chars"], ask["log_chars_total"], rel_tol=1e-6)
    fenced = features("Why does this fail?\n```\nx = [1, 2]\nprint(x[2])\n```")
    assert fenced["code_task"] == 1.0
    for prose in ("Write a short poem about autumn.", "What is the capital of Peru?"):
        row = features(prose)
        assert row["code_task"] == 0.0 and row["code_log_chars"] == 0.0


def test_answer_choices_are_counted_on_lines_or_inline() -> None:
    lines = features("Which is a mammal?\nA) shark\nB) whale\nC) trout\nD) eel\nAnswer:")
    assert math.isclose(lines["choices"], math.log1p(4), rel_tol=1e-6)
    assert math.isclose(lines["choice_log_chars"], lines["log_chars_total"], rel_tol=1e-6)
    inline = features("Pick one: (A) red (B) blue")
    assert math.isclose(inline["choices"], math.log1p(2), rel_tol=1e-6)
    plain = features("Tell me about whales.")
    assert plain["choices"] == 0.0 and plain["choice_log_chars"] == 0.0


def test_domain_lengths_are_features() -> None:
    assert set(DOMAIN_LENGTHS) <= set(FEATURES)
