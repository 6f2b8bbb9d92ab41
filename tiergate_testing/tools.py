"""The tool-calling fixtures the drop-in tests and the SGLang GPU check share: two
functions with bounded schemas (a random model under a constraint still writes valid
JSON, but an unbounded string or number could run until max_tokens), the question that
asks for one, the checks of a single call and the turn that answers it, and the assembly
of streamed tool-call deltas."""

from __future__ import annotations

import json
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


def single_tool_call(completion: Any, named: bool) -> Any:
    """The completion's one tool call, checked: finish reason ``tool_calls``, no text beside
    it, an id, ``get_weather`` when the choice ``named`` it, arguments valid for its schema."""
    import jsonschema

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    message = choice.message
    assert not message.content and message.tool_calls and len(message.tool_calls) == 1
    call = message.tool_calls[0]
    assert call.id and call.type == "function"
    if named:
        assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return call


def tool_result_turn(ask: list[Any], completion: Any, call: Any) -> list[Any]:
    """The loop's second leg: the question, the assistant's call, the tool's result."""
    return [
        *ask,
        completion.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny"}'},
    ]


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
