"""Typed chunks → one Anthropic ``message`` (a whole answer), or → the Messages event
stream; any ``ApiError`` answers in Anthropic's error shape (``gateway.wire.errors``).

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

from backends.base import Chunk, Usage
from gateway.errors import ApiError
from gateway.messages.protocol import MessagesRequest
from gateway.messages.translate import MESSAGE_IDS, to_generation
from gateway.wire.compat import Compat
from gateway.wire.errors import anthropic_body, anthropic_error
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
    return [anthropic_body(error)]


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


MESSAGES = SimpleFormat(
    MessagesRequest, translate, whole, events, MESSAGE_IDS, FRAMING, anthropic_error
)
