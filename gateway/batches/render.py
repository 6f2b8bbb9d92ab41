"""The objects the batch APIs answer with, from the store's records, in the SDKs' shapes
(``openai.types.Batch``, ``FileObject``; ``anthropic.types.messages.MessageBatch``),
and the lines of a batch's results (OpenAI's output and error files, Anthropic's
``results``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.errors import ApiError
from gateway.wire.errors import anthropic_body
from policies.stores.batch_records import (
    CANCELLING,
    ENDED,
    BatchRecord,
    FileRecord,
)


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": record.created_at,
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "expires_at": record.expires_at,
        "status_details": None,
    }


def _at(value: int) -> int | None:
    return value or None


def batch_object(record: BatchRecord) -> dict[str, Any]:
    """OpenAI's ``Batch``; ``usage`` sums what the answered lines used."""
    errors = orjson.loads(record.errors) if record.errors else None
    return {
        "id": record.id,
        "object": "batch",
        "endpoint": record.endpoint,
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": record.input_file_id,
        "completion_window": record.completion_window,
        "status": record.status,
        "output_file_id": record.output_file_id or None,
        "error_file_id": record.error_file_id or None,
        "created_at": record.created_at,
        "in_progress_at": _at(record.in_progress_at),
        "expires_at": record.expires_at,
        "finalizing_at": _at(record.finalizing_at),
        "completed_at": _at(record.completed_at),
        "failed_at": _at(record.failed_at),
        "expired_at": _at(record.expired_at),
        "cancelling_at": _at(record.cancelling_at),
        "cancelled_at": _at(record.cancelled_at),
        "request_counts": {
            "total": record.total,
            "completed": record.completed,
            "failed": record.failed + record.cancelled + record.expired,
        },
        "usage": {
            "input_tokens": record.prompt_tokens,
            "input_tokens_details": {"cached_tokens": record.cached_tokens},
            "output_tokens": record.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": record.prompt_tokens + record.completion_tokens,
        },
        "metadata": record.meta(),
    }


def rfc3339(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def message_batch(record: BatchRecord, base_url: str) -> dict[str, Any]:
    """Anthropic's ``MessageBatch``; counts other than ``processing`` are zero until the
    batch has ended, as Anthropic's are."""
    ended = record.status in ENDED
    status = "ended" if ended else "canceling" if record.status == CANCELLING else "in_progress"
    path = f"/v1/messages/batches/{record.id}/results"
    return {
        "id": record.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": {
            "processing": 0 if ended else record.total,
            "succeeded": record.completed if ended else 0,
            "errored": record.failed if ended else 0,
            "canceled": record.cancelled if ended else 0,
            "expired": record.expired if ended else 0,
        },
        "created_at": rfc3339(record.created_at),
        "expires_at": rfc3339(record.expires_at),
        "ended_at": rfc3339(record.ended_at) if ended else None,
        "cancel_initiated_at": rfc3339(record.cancelling_at) if record.cancelling_at else None,
        "archived_at": None,
        "results_url": base_url.rstrip("/") + path if ended else None,
    }


def line_id(batch_id: str, index: int) -> str:
    return f"batch_req_{batch_id.rpartition('_')[2][:24]}{index:08x}"


def openai_answer(
    batch_id: str, index: int, custom_id: str, request_id: str, status: int, body: Any
) -> bytes:
    """A line that got an HTTP answer (2xx: the output file; else the error file)."""
    response = {"status_code": status, "request_id": request_id, "body": body}
    line = {"id": line_id(batch_id, index), "custom_id": custom_id, "response": response}
    return orjson.dumps({**line, "error": None})


def openai_failure(
    batch_id: str, index: int, custom_id: str | None, code: str, message: str
) -> bytes:
    """A line that got no answer: bad input, cancelled, expired (the error file)."""
    error = {"code": code, "message": message}
    line = {"id": line_id(batch_id, index), "custom_id": custom_id, "response": None}
    return orjson.dumps({**line, "error": error})


def anthropic_answer(custom_id: str, message: Any) -> bytes:
    return orjson.dumps(
        {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}
    )


def anthropic_error(custom_id: str, error: ApiError, request_id: str | None) -> bytes:
    result = {"type": "errored", "error": anthropic_body(error, request_id)}
    return orjson.dumps({"custom_id": custom_id, "result": result})


def anthropic_skipped(custom_id: str, kind: str) -> bytes:
    """``canceled`` or ``expired``: the request was never run."""
    return orjson.dumps({"custom_id": custom_id, "result": {"type": kind}})
