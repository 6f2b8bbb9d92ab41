"""A line's result in its batch's shape: OpenAI's output or error line, Anthropic's
``succeeded`` / ``errored`` / ``canceled`` / ``expired`` result, with what it cost
(``LineMoney``: its run's ``Outcome``, exact)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.batches.render import (
    anthropic_answer,
    anthropic_error,
    anthropic_skipped,
    openai_answer,
    openai_failure,
)
from gateway.errors import ApiError
from gateway.types import Outcome
from policies.stores.batch_records import BatchRecord, LineResult
from policies.stores.budget import to_nano

SKIPPED = {
    "cancel": ("c", "batch_cancelled", "the batch was cancelled before this request ran"),
    "expire": ("x", "batch_expired", "this request could not run within the completion window"),
}


@dataclass(frozen=True, slots=True)
class LineMoney:
    cost_usd: float = 0.0
    saved_usd: float = 0.0  # the interactive price minus the cost
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @classmethod
    def of(cls, outcome: Outcome | None) -> LineMoney:
        """What the line's run came to (nothing: it never ran)."""
        if outcome is None:
            return cls()
        usage = outcome.usage
        return cls(
            outcome.cost_usd,
            outcome.saved_batch_usd,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
        )


@dataclass(frozen=True, slots=True)
class Answered:
    """The endpoint's answer: its body, the request id it ran under, what it cost."""

    body: Any
    request_id: str
    money: LineMoney


class Refused(Exception):
    """The endpoint answered with an error (``error``), after charging ``money``."""

    def __init__(self, error: ApiError, request_id: str | None, money: LineMoney) -> None:
        super().__init__(error.message)
        self.error, self.request_id, self.money = error, request_id, money


def _priced(kind: str, line: bytes, money: LineMoney) -> LineResult:
    return LineResult(
        kind,
        line,
        cost_nano=to_nano(money.cost_usd),
        saved_nano=to_nano(money.saved_usd),
        prompt_tokens=money.prompt_tokens,
        completion_tokens=money.completion_tokens,
        cached_tokens=money.cached_tokens,
    )


def succeeded_line(
    record: BatchRecord, index: int, custom_id: str, answered: Answered
) -> LineResult:
    if record.api == "anthropic":
        line = anthropic_answer(custom_id, answered.body)
    else:
        line = openai_answer(record.id, index, custom_id, answered.request_id, 200, answered.body)
    return _priced("o", line, answered.money)


def refused_line(record: BatchRecord, index: int, custom_id: str, refused: Refused) -> LineResult:
    """The endpoint's error answer (OpenAI's body and status, Anthropic's ``errored``)."""
    error = refused.error
    if record.api == "anthropic":
        line = anthropic_error(custom_id, error, refused.request_id)
    else:
        request_id = refused.request_id or ""
        line = openai_answer(record.id, index, custom_id, request_id, error.status, error.body())
    return _priced("e", line, refused.money)


def skipped_line(record: BatchRecord, index: int, custom_id: str, action: str) -> LineResult:
    kind, code, message = SKIPPED[action]
    if record.api == "anthropic":
        return LineResult(
            kind, anthropic_skipped(custom_id, "canceled" if kind == "c" else "expired")
        )
    return LineResult(kind, openai_failure(record.id, index, custom_id, code, message))
