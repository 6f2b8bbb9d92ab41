"""The tool-calling fixtures the drop-in tests and the SGLang GPU check share: two
functions with bounded schemas (a random model under a constraint still writes valid
JSON, but an unbounded string or number could run until max_tokens), the question that
asks for one, and the assembly of streamed tool-call deltas."""

from __future__ import annotations

from typing import Any

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}


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
