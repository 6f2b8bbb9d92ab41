"""What only the tests share: the repository root, the interpreter, tool-call assembly.

Servers, configs and the fake upstream are in ``tiergate_testing`` (shared with bench/).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def stream_tool_calls(
    client: Any, params: dict[str, Any]
) -> tuple[dict[int, dict[str, str]], str | None, int]:
    """Stream ``params`` (cache bypassed: the engine itself streams, a replay sends a call
    whole) and assemble ``delta.tool_calls`` by index: the calls, the finish reason and how
    many argument fragments arrived. Asserts no text content is streamed beside them."""
    calls: dict[int, dict[str, str]] = {}
    finish, fragments = None, 0
    fresh = {"cache-control": "no-cache"}
    for event in client.chat.completions.create(stream=True, extra_headers=fresh, **params):
        if not event.choices:
            continue
        choice = event.choices[0]
        finish = choice.finish_reason or finish
        assert not choice.delta.content
        for delta in choice.delta.tool_calls or ():
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            if delta.function is not None:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
                fragments += bool(delta.function.arguments)
    return calls, finish, fragments
