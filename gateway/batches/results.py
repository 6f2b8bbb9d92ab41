"""A line's result in its batch's shape: OpenAI's output or error line, Anthropic's
``succeeded`` / ``errored`` / ``canceled`` / ``expired`` result, with what it cost."""

from __future__ import annotations

from gateway.batches.lines import Answered, LineMoney, Refused
from gateway.batches.render import (
    anthropic_answer,
    anthropic_error,
    anthropic_skipped,
    openai_answer,
    openai_failure,
)
from policies.stores.batch_records import BatchRecord, LineResult
from policies.stores.budget import to_nano

SKIPPED = {
    "cancel": ("c", "batch_cancelled", "the batch was cancelled before this request ran"),
    "expire": ("x", "batch_expired", "this request could not run within the completion window"),
}


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
