"""Typed chunks → one Anthropic ``message`` (a whole answer), or → the Messages event
stream; and any ``ApiError`` → Anthropic's error shape.

The stream is the sequence the ``anthropic`` SDK's ``messages.stream()`` accumulator and
Claude Code parse: ``message_start``, ``ping``; per content block
``content_block_start``, ``content_block_delta`` (``text_delta`` or
``input_json_delta``)…, ``content_block_stop``; then ``message_delta`` (the stop reason
and the usage) and ``message_stop``. An error after the first event is one ``error``
event. Nothing here knows HTTP or the gateway's state.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import orjson
from starlette.responses import Response

from backends.base import Chunk, Usage
from gateway.errors import ApiError
from gateway.messages.protocol import MessagesRequest
from gateway.messages.translate import to_generation
from gateway.wire.compat import Compat
from gateway.wire.format import Caller, RunView, SimpleFormat, Turn
from gateway.wire.sse import Event, named_events
from routers.session import SessionHint

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Anthropic's error types and statuses, by the gateway's status.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
}
OVERLOADED_STATUS = 529  # what Anthropic answers when it is overloaded (its SDK retries it)


def error_status(error: ApiError) -> int:
    return OVERLOADED_STATUS if error.code == "overloaded" else error.status


def error_body(error: ApiError, request_id: str | None = None) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``, Anthropic's shape."""
    if error.code == "overloaded":
        kind = "overloaded_error"
    else:
        kind = _ERROR_TYPES.get(error.status, "api_error")
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": error.message}}
    request_id = request_id or error.headers.get("x-request-id")
    if request_id:
        body["request_id"] = request_id
    return body


def anthropic_error(error: ApiError, extra_headers: dict[str, str]) -> Response:
    """The Messages family's ``ErrorShape``: Anthropic's body and status (529 overloaded)."""
    headers = {**error.headers, **extra_headers}
    body = error_body(error, headers.get("x-request-id"))
    return Response(
        orjson.dumps(body),
        status_code=error_status(error),
        media_type="application/json",
        headers=headers,
    )


def stop_sequence(final: Chunk) -> str | None:
    """The request's stop string the answer ended on, when the engine said which."""
    return final.stop_sequence if final.finish_reason == "stop" else None


def stop_reason(final: Chunk) -> str:
    if stop_sequence(final) is not None:
        return "stop_sequence"
    return _STOP_REASONS.get(final.finish_reason or "stop", "end_turn")


def usage_body(usage: Usage | None) -> dict[str, Any]:
    """Anthropic counts cached prompt tokens apart from ``input_tokens``."""
    usage = usage or Usage(0, 0)
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
    }


def tool_use_block(call: Mapping[str, Any]) -> dict[str, Any]:
    """A chat tool call (``id``, ``function.name``, ``function.arguments``) as a block."""
    function = call.get("function") or {}
    arguments = str(function.get("arguments") or "{}")
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = {"_raw": arguments}  # a model's broken JSON: kept, never dropped
    if not isinstance(parsed, dict):
        parsed = {"_value": parsed}
    return {
        "type": "tool_use",
        "id": str(call.get("id") or f"toolu_{os.urandom(12).hex()}"),
        "name": str(function.get("name", "")),
        "input": parsed,
    }


def message_body(run: RunView, content: list[dict[str, Any]], final: Chunk | None) -> Event:
    return {
        "id": run.request_id,
        "type": "message",
        "role": "assistant",
        "model": run.model,
        "content": content,
        "stop_reason": None if final is None else stop_reason(final),
        "stop_sequence": None if final is None else stop_sequence(final),
        "usage": usage_body(None if final is None else final.usage),
    }


def whole(run: RunView, text: str, final: Chunk) -> Event:
    content: list[dict[str, Any]] = []
    if text or not final.tool_calls:
        content.append({"type": "text", "text": text})
    content.extend(tool_use_block(call) for call in final.tool_calls or ())
    return message_body(run, content, final)


async def events(run: RunView, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Event]:
    renderer = _Blocks()
    yield {"type": "message_start", "message": message_body(run, [], None)}
    yield {"type": "ping"}
    async for chunk in chunks:
        for event in renderer.chunk(chunk):
            yield event


class _Blocks:
    """The open content block, by index: text, or one tool call per chat delta index."""

    def __init__(self) -> None:
        self.index = -1
        self.open: str | None = None  # "text" or "tool:<chat index>"
        self.calls_seen = 0

    def _start(self, kind: str, block: dict[str, Any]) -> list[Event]:
        events = self._stop()
        self.index += 1
        self.open = kind
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        return events

    def _stop(self) -> list[Event]:
        if self.open is None:
            return []
        self.open = None
        return [{"type": "content_block_stop", "index": self.index}]

    def chunk(self, chunk: Chunk) -> list[Event]:
        events: list[Event] = []
        if chunk.text:
            if self.open != "text":
                events.extend(self._start("text", {"type": "text", "text": ""}))
            text = {"type": "text_delta", "text": chunk.text}
            events.append({"type": "content_block_delta", "index": self.index, "delta": text})
        for fragment in chunk.tool_call_deltas or ():
            events.extend(self._call_delta(fragment))
        if chunk.finish_reason is not None:
            events.extend(self._finish(chunk))
        return events

    def _call_delta(self, delta: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        key = f"tool:{int(delta.get('index', 0))}"
        function = delta.get("function") or {}
        if self.open != key:
            block = tool_use_block({**delta, "function": {"name": function.get("name", "")}})
            block["input"] = {}
            events.extend(self._start(key, block))
            self.calls_seen += 1
        piece = function.get("arguments")
        if piece:
            json_delta = {"type": "input_json_delta", "partial_json": piece}
            events.append({"type": "content_block_delta", "index": self.index, "delta": json_delta})
        return events

    def _finish(self, final: Chunk) -> list[Event]:
        events: list[Event] = []
        for call in (final.tool_calls or ())[self.calls_seen :]:  # calls sent only whole
            block = tool_use_block(call)
            arguments = orjson.dumps(block["input"]).decode()
            events.extend(self._start("tool:whole", {**block, "input": {}}))
            json_delta = {"type": "input_json_delta", "partial_json": arguments}
            events.append({"type": "content_block_delta", "index": self.index, "delta": json_delta})
        if self.index < 0:  # an empty answer still has its one text block
            events.extend(self._start("text", {"type": "text", "text": ""}))
        events.extend(self._stop())
        usage = usage_body(final.usage)
        delta = {"stop_reason": stop_reason(final), "stop_sequence": stop_sequence(final)}
        events.append({"type": "message_delta", "delta": delta, "usage": usage})
        events.append({"type": "message_stop"})
        return events


def _stream_error(error: ApiError) -> Sequence[Event]:
    return [error_body(error)]


FRAMING = named_events(_stream_error)


def beta_hints(headers: Mapping[str, str]) -> Compat:
    """``anthropic-beta`` flags: none changes what a tier here does."""
    flags = headers.get("anthropic-beta", "")
    named = (f"anthropic-beta:{f.strip()}" for f in flags.split(",") if f.strip())
    return Compat(ignored=tuple(dict.fromkeys(named)))


def translate(body: MessagesRequest, caller: Caller) -> Turn:
    """By the tenant's compatibility mode; the ``anthropic-beta`` flags join the hints."""
    done = to_generation(body, caller.principal.policy.compat)
    compat = done.compat.merged(beta_hints(caller.headers))
    # ``metadata.user_id`` stays with the ledger event and the trace, and scopes the session
    annotations = body.annotations()
    user = (annotations or {}).get("user_id")
    session = SessionHint("user", user) if user else None
    return Turn(body.model, done.generation, body.stream, True, annotations, compat, session)


MESSAGES = SimpleFormat(MessagesRequest, translate, whole, events, FRAMING, anthropic_error)
