"""The judge seam: given a request and two answers, was each acceptable?

``Judge.judge(case)`` returns a ``Verdict`` or None (no label). Implementations:

* ``ModelJudge``: a configured tier (or a pinned model) answers the written rubric
  (``routers/rubrics/judge.md``) at the operator's expense; its reply is parsed by
  ``routers.judge_prompt.parse_verdict``, and a reply without one clear verdict gives none.
* ``KnownLabelsJudge``: for replaying labelled data through the gateway, it gives the
  verdicts the rubric asks for from the known per-tier correctness of each request it has
  a row for (``judge.labels``): an answer is acceptable when its correctness is at least
  0.5, each answer on its own (the rubric judges each on its own too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from backends.base import GenerationRequest, SamplingParams
from gateway.learning.operator_calls import Answer, OperatorDesk, operator_call
from policies.feedback_spec import JudgeSpec
from policies.schema import GatewayConfig
from routers.embedding import last_user_text
from routers.judge_prompt import Verdict, judge_messages, load_rubric, parse_verdict


class JudgeUnavailable(ValueError):
    """The judge cannot be built (an unreadable rubric or labels file)."""


@dataclass(frozen=True, slots=True)
class JudgeCase:
    request_id: str
    messages: tuple[Mapping[str, Any], ...]
    cheaper: Answer
    reference: Answer
    config: GatewayConfig  # the snapshot of the request being judged


class Judge(Protocol):
    async def judge(self, case: JudgeCase) -> Verdict | None: ...


class ModelJudge:
    def __init__(self, desk: OperatorDesk, spec: JudgeSpec, rubric: str) -> None:
        self.desk = desk
        self.spec = spec
        self.rubric = rubric
        self.unparsed = 0  # replies that held no single verdict
        self.answered = 0

    def _tier(self, config: GatewayConfig) -> str | None:
        if self.spec.tier is not None:
            return self.spec.tier
        return config.tier_of_model(self.spec.model) if self.spec.model else None

    async def judge(self, case: JudgeCase) -> Verdict | None:
        tier = self._tier(case.config)
        if tier is None or tier not in self.desk.pools:
            return None
        messages = judge_messages(
            self.rubric, case.messages, case.cheaper.text, case.reference.text
        )
        generation = GenerationRequest(
            request_id=f"{case.request_id}-judge",
            model=self.spec.model or tier,
            sampling=SamplingParams(max_tokens=self.spec.max_tokens, temperature=0.0),
            messages=tuple(messages),
            whole=True,
        )
        answer = await operator_call(
            self.desk, case.config, tier, generation, "judge", self.spec.model
        )
        if answer is None:
            return None
        self.answered += 1
        verdict = parse_verdict(answer.text)
        if verdict is None:
            self.unparsed += 1
        return verdict


def text_key(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


class KnownLabelsJudge:
    """Rows of ``{"prompt": str, "tiers": {tier: correctness 0..1}}``, one a line; a
    request whose last user text is a row's prompt gets the rubric's verdicts: each answer
    acceptable when its tier's correctness is at least 0.5 (the reference's only when the
    row has its tier); any other request, none."""

    def __init__(self, known: Mapping[str, Mapping[str, float]]) -> None:
        self.known = dict(known)
        self.unknown = 0

    @classmethod
    def from_file(cls, path: Path) -> KnownLabelsJudge:
        known: dict[str, dict[str, float]] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise JudgeUnavailable(f"{path}: cannot read: {exc.strerror}") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                known[text_key(str(row["prompt"]))] = {
                    str(t): float(v) for t, v in dict(row["tiers"]).items()
                }
            except (ValueError, KeyError, TypeError) as exc:
                raise JudgeUnavailable(f"{path}:{number}: not a labelled row: {exc}") from exc
        return cls(known)

    async def judge(self, case: JudgeCase) -> Verdict | None:
        row = self.known.get(text_key(last_user_text(case.messages)))
        if row is None or case.cheaper.tier not in row:
            self.unknown += 1
            return None
        mine, theirs = row[case.cheaper.tier], row.get(case.reference.tier)
        return Verdict(mine >= 0.5, "known label", None if theirs is None else theirs >= 0.5)


def build_judge(spec: JudgeSpec, desk: OperatorDesk) -> Judge:
    """Raises ``JudgeUnavailable``; blocking (reads files): call it off the loop."""
    if spec.labels is not None:
        return KnownLabelsJudge.from_file(Path(spec.labels).expanduser())
    try:
        rubric = load_rubric(spec.rubric)
    except OSError as exc:
        raise JudgeUnavailable(f"judge rubric {spec.rubric}: {exc.strerror}") from exc
    return ModelJudge(desk, spec, rubric)
