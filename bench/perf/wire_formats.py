"""The wire formats bench/perf/overhead.py sends its passthrough request in, each measured next
to chat in the same rounds on tiergate alone (the "wire formats" table of bench/harness/report.py:
CPU per request, and its ratio to chat's per round)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class WireFormat:
    path: str
    prompt_key: str  # where the messages go in the body
    extra: dict[str, Any]
    stream_end: str  # what a complete stream carries


WIRE_FORMATS = {
    "chat": WireFormat("/v1/chat/completions", "messages", {}, "data: [DONE]\n\n"),
    # store: false, as Codex CLI sends it: the passthrough, without a stored record
    "responses": WireFormat("/v1/responses", "input", {"store": False}, "response.completed"),
    # max_tokens: Anthropic requires it (the system turn inside messages, as Claude Code
    # sends them, joins the first system message)
    "messages": WireFormat("/v1/messages", "messages", {"max_tokens": 64}, "message_stop"),
}


def wire_phases(phase: Callable[..., P]) -> tuple[P, ...]:
    """``API 0ms c16`` and ``API stream c16`` for every format, chat first in each pair."""
    return tuple(
        phase(f"{api} {kind} c16", model, stream, 16, api)
        for kind, model, stream in (("0ms", "bench-0ms", False), ("stream", "bench-stream", True))
        for api in WIRE_FORMATS
    )
