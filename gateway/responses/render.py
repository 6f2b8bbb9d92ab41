"""Typed chunks → a Response object (a whole answer), or → the Responses event stream.

The stream is the sequence the ``openai`` SDK's ``responses.stream()`` accumulator and
Codex CLI parse, each event with its ``sequence_number``: ``response.created``,
``response.in_progress``; per output item ``response.output_item.added``, then for a
message ``response.content_part.added``, ``response.output_text.delta``… ``.done``,
``response.content_part.done``, for a function call
``response.function_call_arguments.delta``… ``.done``; ``response.output_item.done``;
then ``response.completed`` (``response.incomplete`` when ``max_output_tokens`` cut it).
An error after the first event is an ``error`` event and ``response.failed``, as OpenAI
sends them. Nothing here knows HTTP or the gateway's state.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from backends.base import Chunk, Usage
from gateway.errors import ApiError
from gateway.responses.translate import new_id

Item = dict[str, Any]
TERMINAL = frozenset({"response.completed", "response.incomplete"})
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_ERROR_CODES = {"rate_limit_exceeded", "invalid_prompt", "server_error"}


@dataclass(frozen=True, slots=True)
class Echo:
    """What a Response object says beside its output: the request, as it was honoured."""

    response_id: str
    model: str
    fields: Mapping[str, Any]  # instructions, tools, tool_choice, text, metadata…
    namespaces: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    created_at: int = field(default_factory=lambda: int(time.time()))


def response_object(
    echo: Echo,
    status: str,
    output: list[Item],
    usage: Usage | None = None,
    finish_reason: str | None = None,
    error: Item | None = None,
) -> Item:
    reason = _INCOMPLETE.get(finish_reason or "")
    if reason is not None and status == "completed":
        status = "incomplete"
    return {
        "id": echo.response_id,
        "object": "response",
        "created_at": echo.created_at,
        "status": status,
        "model": echo.model,
        "output": output,
        "error": error,
        "incomplete_details": {"reason": reason} if status == "incomplete" else None,
        **echo.fields,
        "usage": usage_body(usage) if usage is not None else None,
    }


def usage_body(usage: Usage) -> Item:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def message_item(item_id: str, text: str, status: str = "completed") -> Item:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [part] if status != "in_progress" else [],
    }


def call_item(
    item_id: str,
    call: Mapping[str, Any],
    namespaces: Mapping[str, tuple[str, str]],
    status: str = "completed",
) -> Item:
    """A chat tool call (``id``, ``function.name``, ``function.arguments``) as an item."""
    function = call.get("function") or {}
    name = str(function.get("name", ""))
    item: Item = {
        "id": item_id,
        "type": "function_call",
        "call_id": str(call.get("id") or new_id("call")),
        "name": name,
        "arguments": str(function.get("arguments", "")) if status == "completed" else "",
        "status": status,
    }
    if name in namespaces:
        item["namespace"], item["name"] = namespaces[name]
    return item


def whole_response(echo: Echo, text: str, final: Chunk) -> Item:
    """The Response of a whole answer: its text as one message, then its tool calls."""
    status = "incomplete" if final.finish_reason in _INCOMPLETE else "completed"
    output: list[Item] = []
    if text or not final.tool_calls:
        output.append(message_item(new_id("msg"), text, status))
    for call in final.tool_calls or ():
        output.append(call_item(new_id("fc"), call, echo.namespaces))
    return response_object(echo, "completed", output, final.usage, final.finish_reason)


class ResponseEvents:
    """One streamed Response: ``events`` over the run's chunks; ``failed`` for an error
    after the first event; ``final`` is the Response the last event carries."""

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self.sequence = 0
        self.output: list[Item] = []  # finished items, in output order
        self.final: Item | None = None
        self._message: Item | None = None  # the open message: its id, index and text
        self._text: list[str] = []
        self._calls: dict[int, Item] = {}  # open calls by chat delta index
        self._next_index = 0

    def _event(self, kind: str, **fields: Any) -> Item:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    async def events(self, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Item]:
        started = response_object(self.echo, "in_progress", [])
        yield self._event("response.created", response=started)
        yield self._event("response.in_progress", response=started)
        async for chunk in chunks:
            for event in self._chunk(chunk):
                yield event

    def _chunk(self, chunk: Chunk) -> list[Item]:
        events: list[Item] = []
        if chunk.text:
            if self._message is None:
                events.extend(self._open_message())
            assert self._message is not None
            self._text.append(chunk.text)
            events.append(self._event("response.output_text.delta", **self._at(), delta=chunk.text))
        for delta in chunk.tool_call_deltas or ():
            events.extend(self._call_delta(delta))
        if chunk.finish_reason is not None:
            events.extend(self._finish(chunk))
        return events

    def _at(self) -> Item:
        assert self._message is not None
        message = self._message
        return {
            "item_id": message["id"],
            "output_index": message["index"],
            "content_index": 0,
            "logprobs": [],
        }

    def _claim_index(self) -> int:
        index, self._next_index = self._next_index, self._next_index + 1
        return index

    def _open_message(self) -> list[Item]:
        message_id, index = new_id("msg"), self._claim_index()
        self._message = {"id": message_id, "index": index}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        item = message_item(message_id, "", "in_progress")
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event(
                "response.content_part.added",
                item_id=message_id,
                output_index=index,
                content_index=0,
                part=part,
            ),
        ]

    def _close_message(self, status: str) -> list[Item]:
        if self._message is None:
            return []
        at, text = self._at(), "".join(self._text)
        item = message_item(at["item_id"], text, status)
        self._message, self._text = None, []
        self.output.append(item)
        part = item["content"][0]
        place = {k: at[k] for k in ("item_id", "output_index", "content_index")}
        index = at["output_index"]
        return [
            self._event("response.output_text.done", **at, text=text),
            self._event("response.content_part.done", **place, part=part),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _call_delta(self, delta: Mapping[str, Any]) -> list[Item]:
        events = self._close_message("completed")
        position = int(delta.get("index", 0))
        call = self._calls.get(position)
        if call is None:
            item = call_item(new_id("fc"), delta, self.echo.namespaces, "in_progress")
            call = {"item": item, "index": self._claim_index(), "arguments": []}
            self._calls[position] = call
            events.append(
                self._event("response.output_item.added", output_index=call["index"], item=item)
            )
        piece = (delta.get("function") or {}).get("arguments")
        if piece:
            call["arguments"].append(piece)
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=call["item"]["id"],
                    output_index=call["index"],
                    delta=piece,
                )
            )
        return events

    def _finish(self, final: Chunk) -> list[Item]:
        status = "incomplete" if final.finish_reason in _INCOMPLETE else "completed"
        events = self._close_message(status)
        whole = list(final.tool_calls or ())
        for position, call in sorted(self._calls.items()):
            done = whole[position] if position < len(whole) else None
            events.extend(self._close_call(call, done))
        for done in whole[len(self._calls) :]:  # calls the engine sent only whole
            position = len(self._calls)
            events.extend(self._call_delta({**done, "index": position}))
            events.extend(self._close_call(self._calls[position], done))
        if not self.output:
            events.extend(self._open_message())
            events.extend(self._close_message(status))
        self.final = response_object(
            self.echo, "completed", self.output, final.usage, final.finish_reason
        )
        kind = (
            "response.incomplete" if self.final["status"] == "incomplete" else "response.completed"
        )
        events.append(self._event(kind, response=self.final))
        return events

    def _close_call(self, call: Item, done: Mapping[str, Any] | None) -> list[Item]:
        item = dict(call["item"])
        arguments = "".join(call["arguments"])
        if done is not None:
            arguments = str((done.get("function") or {}).get("arguments", arguments))
        item.update(arguments=arguments, status="completed")
        self.output.append(item)
        place = {"item_id": item["id"], "output_index": call["index"]}
        return [
            self._event(
                "response.function_call_arguments.done",
                **place,
                arguments=arguments,
                name=item["name"],
            ),
            self._event("response.output_item.done", output_index=call["index"], item=item),
        ]

    def failed(self, error: ApiError) -> list[Item]:
        """What an error after the first event becomes: OpenAI's ``error`` event, then
        ``response.failed`` with what was finished so far."""
        code = error.code if error.code in _ERROR_CODES else "server_error"
        failed = response_object(
            self.echo, "failed", self.output, error={"code": code, "message": error.message}
        )
        return [
            self._event("error", code=error.code, message=error.message, param=error.param),
            self._event("response.failed", response=failed),
        ]
