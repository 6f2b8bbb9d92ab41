"""A new batch: its lines checked, kept, queued.

OpenAI's input is a JSONL file: each line ``{"custom_id", "method": "POST", "url", "body"}``.
A line that cannot run (not JSON, no ``custom_id``, another endpoint's ``url``, a
``custom_id`` already used by an earlier line, too large) does not stop the batch: it
gets its result at once, an error line in the error file naming the line and what is
wrong, and is never run, held or charged. What stops the whole batch is answered with an
error before anything is kept (an empty file, too many lines, the tenant's limits).
Anthropic's requests arrive in the body; a repeated ``custom_id`` refuses the batch (its
results are matched by ``custom_id``).

The batch is kept ``validating``, its lines written, then moved to ``in_progress`` and
its lines queued; ``queued`` marks the queueing done (the queue's generation), so a
replica that died half-way, or a queue that lost its lines, is made up for by the sweep
(``gateway.batches.runner``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.batches.files import Files
from gateway.batches.finish import finalize
from gateway.batches.protocol import MAX_CUSTOM_ID, MessageBatchRequest
from gateway.batches.render import openai_failure
from gateway.errors import InvalidRequest
from gateway.wire.common import MAX_JSON_DEPTH, too_deep
from policies.batches_spec import BatchesConfig
from policies.stores.batch_records import (
    IN_PROGRESS,
    VALIDATING,
    BatchRecord,
    LineResult,
)
from policies.tenants import Principal


@dataclass(slots=True)
class Lines:
    """A batch's lines: the runnable ones (index → stored input) and the others' results."""

    runnable: dict[int, bytes] = field(default_factory=dict)
    refused: list[tuple[int, LineResult]] = field(default_factory=list)
    total: int = 0


def new_batch_id(api: str) -> str:
    return (
        f"msgbatch_{os.urandom(12).hex()}"
        if api == "anthropic"
        else f"batch_{os.urandom(12).hex()}"
    )


def _problem(raw: bytes, endpoint: str, seen: set[str], max_bytes: int) -> tuple[Any, str, str]:
    """(the line, or None; the problem's code; its words), code empty when it may run."""
    if len(raw) > max_bytes:
        return None, "line_too_large", f"the line is over {max_bytes} bytes"
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, "invalid_json_line", f"not valid JSON ({exc})"
    if not isinstance(data, dict):
        return None, "invalid_json_line", "not a JSON object"
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= MAX_CUSTOM_ID:
        return data, "invalid_custom_id", f"custom_id must be a string of 1 to {MAX_CUSTOM_ID}"
    if data.get("method") != "POST":
        return data, "invalid_method", "method must be POST"
    if data.get("url") != endpoint:
        return (
            data,
            "mismatched_endpoint",
            (f"url {data.get('url')!r} is not the batch's endpoint {endpoint!r}"),
        )
    body = data.get("body")
    if not isinstance(body, dict):
        return data, "invalid_body", "body must be a JSON object"
    deep = too_deep(body)  # as the endpoint's own parse refuses it (and orjson stops at 255)
    if deep is not None:
        return (
            data,
            "invalid_body",
            f"body nests deeper than {MAX_JSON_DEPTH} levels (at {_cut(deep)})",
        )
    if custom_id in seen:
        return data, "duplicate_custom_id", f"custom_id {custom_id!r} is used by an earlier line"
    return data, "", ""


def _cut(path: str) -> str:
    return path if len(path) <= 120 else path[:117] + "..."


def openai_lines(content: bytes, endpoint: str, batch_id: str, spec: BatchesConfig) -> Lines:
    """Every non-empty line of the input file, checked (CPU work: run it in a thread)."""
    raw_lines = [line for line in content.split(b"\n") if line.strip()]
    if not raw_lines:
        raise InvalidRequest("the input file has no lines", param="input_file_id")
    lines = Lines(total=len(raw_lines))
    seen: set[str] = set()
    for index, raw in enumerate(raw_lines):
        data, code, words = _problem(raw.strip(), endpoint, seen, spec.max_line_bytes)
        if code:
            custom_id = data.get("custom_id") if isinstance(data, dict) else None
            custom_id = custom_id if isinstance(custom_id, str) else None
            message = f"line {index + 1}: {words}"
            lines.refused.append(
                (index, LineResult("e", openai_failure(batch_id, index, custom_id, code, message)))
            )
            continue
        seen.add(data["custom_id"])
        stored = {"custom_id": data["custom_id"], "body": data["body"]}
        lines.runnable[index] = orjson.dumps(stored)
    return lines


def anthropic_lines(requests: Sequence[MessageBatchRequest]) -> Lines:
    """The requests of a message batch: one that cannot run refuses the whole batch."""
    seen: set[str] = set()
    lines = Lines(total=len(requests))
    for index, request in enumerate(requests):
        deep = too_deep(request.params)
        if deep is not None:
            raise InvalidRequest(
                f"requests[{index}].params: JSON nested deeper than {MAX_JSON_DEPTH} levels "
                f"(at {_cut(deep)})",
                param=f"requests.{index}.params",
                code="invalid_value",
            )
        if request.custom_id in seen:
            raise InvalidRequest(
                f"requests[{index}].custom_id: {request.custom_id!r} is not unique",
                param=f"requests.{index}.custom_id",
            )
        seen.add(request.custom_id)
        stored = {"custom_id": request.custom_id, "body": request.params}
        lines.runnable[index] = orjson.dumps(stored)
    return lines


@dataclass(frozen=True, slots=True)
class Order:
    """Who asks for which batch."""

    principal: Principal
    key_digest: str
    api: str  # openai | anthropic
    endpoint: str
    batch_id: str
    input_file_id: str = ""
    metadata: dict[str, str] | None = None
    output_ttl_s: int = 0


async def create(files: Files, spec: BatchesConfig, order: Order, lines: Lines) -> BatchRecord:
    """Keep, then queue, the batch ``order`` asks for with ``lines``."""
    limits = spec.limits_for(order.principal.tenant)
    if lines.total > limits.lines_per_batch:
        raise InvalidRequest(
            f"the batch has {lines.total} lines; at most {limits.lines_per_batch} are taken",
            code="too_many_lines",
        )
    now = int(time.time())
    record = BatchRecord(
        id=order.batch_id,
        tenant=order.principal.tenant,
        key_id=order.principal.key_id,
        key_digest=order.key_digest,
        api=order.api,
        endpoint=order.endpoint,
        created_at=now,
        expires_at=now + int(spec.completion_window_s),
        input_file_id=order.input_file_id,
        metadata=orjson.dumps(order.metadata).decode() if order.metadata else "",
        output_ttl_s=order.output_ttl_s,
        total=lines.total,
    )
    store = files.store
    refused = await store.add_batch(record, limits)
    if refused is not None:
        limit = getattr(limits, refused)
        raise InvalidRequest(
            f"the tenant's {refused.replace('_', ' ')} would pass its limit of {limit}; "
            "wait for a batch to end",
            code="batch_limit_exceeded",
        )
    tenant, batch_id = record.tenant, record.id
    await store.add_lines(tenant, batch_id, lines.runnable, lines.refused)
    moved_to, moved = await store.move(tenant, batch_id, [VALIDATING], IN_PROGRESS, now)
    if moved:
        generation = await store.queue.enqueue(tenant, batch_id, sorted(lines.runnable))
        moved_to, _ = await store.move(
            tenant, batch_id, [IN_PROGRESS], IN_PROGRESS, now, {"queued": str(generation)}
        )
    if moved_to is not None and moved_to.done >= moved_to.total:  # nothing could run
        moved_to = await finalize(files, spec, moved_to, now) or moved_to
    assert moved_to is not None, "a batch just kept is there"
    return moved_to


async def checked_openai_lines(
    content: bytes, endpoint: str, batch_id: str, spec: BatchesConfig
) -> Lines:
    """``openai_lines`` off the event loop."""
    return await asyncio.to_thread(openai_lines, content, endpoint, batch_id, spec)
