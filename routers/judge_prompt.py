"""The judge's prompt and the reading of its verdict: pure text in, text out.

The rubric (``routers/rubrics/judge.md``, or the file ``routing.feedback.judge.rubric``
names) is the system message; the request and the two answers are the user message,
each cut to ``PART_CHARS``. The verdicts are read from the answer's lines: exactly one
``VERDICT A: ACCEPTABLE`` or ``VERDICT A: NOT ACCEPTABLE`` (``VERDICT:`` alone is A's;
case, surrounding ``*`` and backticks aside), and at most one ``VERDICT B: …``, the
verdict on the more capable answer. Anything else (no verdict on A, two different ones
on either, a hedge) is no verdict, and no label is made from it; without a B line only
A's answer is labelled.

Each answer is judged on its own (is it acceptable for the request?), the other answer
serving as a cross-check: a label then means what the per-tier quality model predicts,
P(this tier's answer is acceptable), for both tiers of the pair (the largest included).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routers.features import message_text

SHIPPED_RUBRIC = Path(__file__).resolve().parent / "rubrics" / "judge.md"
PART_CHARS = 6000  # of the request and of each answer: the judge's cost stays bounded
_VERDICT = re.compile(
    r"^verdict(?:\s+(a|b))?\s*:\s*(acceptable|not acceptable)\s*[.!]?$", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Verdict:
    acceptable: bool  # the cheaper answer's (A)
    reason: str
    reference_acceptable: bool | None = None  # the more capable answer's (B), when given


def load_rubric(path: str | None) -> str:
    """The rubric text; raises ``OSError`` for a file that cannot be read."""
    return (Path(path).expanduser() if path else SHIPPED_RUBRIC).read_text(encoding="utf-8")


def _cut(text: str) -> str:
    return text if len(text) <= PART_CHARS else text[:PART_CHARS] + " [... cut]"


def render_request(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(f"[{m.get('role', 'user')}] {message_text(m)}" for m in messages)


def judge_messages(
    rubric: str, messages: Sequence[Mapping[str, Any]], cheaper: str, reference: str
) -> list[dict[str, str]]:
    """The chat the judge answers: the rubric, then the request and both answers."""
    case = (
        f"REQUEST:\n{_cut(render_request(messages))}\n\n"
        f"ANSWER A (cheaper model):\n{_cut(cheaper)}\n\n"
        f"ANSWER B (more capable model):\n{_cut(reference)}\n\n"
        "Was each answer acceptable? Reply with the two VERDICT lines."
    )
    return [{"role": "system", "content": rubric}, {"role": "user", "content": case}]


def parse_verdict(answer: str) -> Verdict | None:
    """The judge's verdicts, or None when it gave none on A (or contradicted itself)."""
    found: dict[str, set[bool]] = {"a": set(), "b": set()}
    reason = ""
    for raw in answer.splitlines():
        line = raw.strip().strip("*`_ ").strip()
        match = _VERDICT.match(line)
        if match is not None:
            found[(match.group(1) or "a").lower()].add(match.group(2).lower() == "acceptable")
        elif line.lower().startswith("reason:") and not reason:
            reason = line[len("reason:") :].strip()[:300]
    a, b = found["a"], found["b"]
    if len(a) != 1 or len(b) > 1:
        return None
    return Verdict(a.pop(), reason, b.pop() if b else None)
