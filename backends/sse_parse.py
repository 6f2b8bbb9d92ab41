"""Incremental pieces for reading an OpenAI-style SSE stream: events, usage, tool calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from backends.base import TokenLogprob, Usage


class EventSplitter:
    """Bytes in (any split), the ``data`` payload of each complete event out.

    Handles ``\\n`` and ``\\r\\n`` line ends, ``data:`` with or without the space,
    comment lines and multi-line data (joined with ``\\n`` as the SSE spec says).
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data if self._buffer else data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[bytes] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append(block[6:])  # the common case: one data line
                continue
            lines = [
                line[5:].removeprefix(b" ") for line in block.split(b"\n") if line[:5] == b"data:"
            ]
            if lines:
                events.append(b"\n".join(lines))
        return events


def usage_of(raw: Mapping[str, Any] | None) -> Usage | None:
    if not raw:
        return None
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


def logprobs_of(raw: Any) -> tuple[TokenLogprob, ...] | None:
    """OpenAI's chat ``logprobs`` (a dict, or an SDK object with ``model_dump``) → entries."""
    if raw is not None and not isinstance(raw, Mapping):
        raw = raw.model_dump()
    content = (raw or {}).get("content")
    if not content:
        return None
    return tuple(
        TokenLogprob(
            str(e.get("token", "")),
            float(e.get("logprob") or 0.0),
            bytes(e.get("bytes") or ()),
            tuple(
                (
                    str(t.get("token", "")),
                    float(t.get("logprob") or 0.0),
                    bytes(t.get("bytes") or ()),
                )
                for t in e.get("top_logprobs") or ()
            ),
        )
        for e in content
    )


class ToolCallMerger:
    """Tool calls stream in fragments keyed by index; join them into whole calls."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}

    def merge(self, fragments: Sequence[Mapping[str, Any]]) -> None:
        for fragment in fragments:
            index = int(fragment.get("index") or 0)
            call = self._calls.setdefault(
                index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if fragment.get("id"):
                call["id"] = fragment["id"]
            function = fragment.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""

    def result(self) -> tuple[dict[str, Any], ...] | None:
        return tuple(self._calls[i] for i in sorted(self._calls)) or None
