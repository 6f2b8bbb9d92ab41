"""OpenAI tool calls, whatever engine made them: call ids, ``delta.tool_calls`` fragments
and the whole calls they add up to, and the constrained form ``required`` / a named
function take where an engine decodes under a JSON schema.

That form is a JSON array of ``{"name": N, "parameters": ARGS}`` objects, each ``ARGS``
held to its function's ``parameters`` schema by the engine's grammar, so the arguments
are schema-valid by construction. ``CallArrayReader`` turns the array back into calls as
each element completes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_EMPTY_OBJECT = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """What a request asks of the decoder: the tools the model may call, and how."""

    mode: str  # "none" (free text), "auto" (text or a call), "forced" (a call)
    functions: tuple[Mapping[str, Any], ...] = ()


def tool_plan(tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any) -> ToolPlan:
    """OpenAI's ``tool_choice`` semantics (validated at the wire: names exist)."""
    functions = tuple(t["function"] for t in tools or () if t.get("type") == "function")
    if not functions or tool_choice == "none":
        return ToolPlan("none")
    if isinstance(tool_choice, Mapping):
        name = tool_choice["function"]["name"]
        return ToolPlan("forced", tuple(f for f in functions if f["name"] == name))
    return ToolPlan("forced" if tool_choice == "required" else "auto", functions)


def new_call_id() -> str:
    return "call_" + os.urandom(12).hex()


def call_array_schema(
    functions: Sequence[Mapping[str, Any]], *, parallel: bool = True
) -> dict[str, Any]:
    """The JSON schema of one or more calls to ``functions`` (one at most without
    ``parallel``). A single function's ``$defs`` stay at its ``parameters`` root; with
    several, a ``$defs`` name two of them define differently is a ``ValueError`` (the
    schemas would be ambiguous once merged)."""
    items = [_call_schema(f) for f in functions]
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": items[0] if len(items) == 1 else {"anyOf": items},
    }
    if not parallel:
        schema["maxItems"] = 1
    if len(items) > 1 and (defs := _merged_defs(functions)):
        schema["$defs"] = defs
    return schema


def _call_schema(function: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": [function["name"]]},
            "parameters": function.get("parameters") or _EMPTY_OBJECT,
        },
        "required": ["name", "parameters"],
        "additionalProperties": False,
    }


def _merged_defs(functions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for function in functions:
        for name, definition in ((function.get("parameters") or {}).get("$defs") or {}).items():
            if merged.setdefault(name, definition) != definition:
                raise ValueError(f"tools define `$defs.{name}` differently")
    return merged


def response_schema(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema ``response_format`` holds the answer to (None: free text)."""
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        return dict(response_format["json_schema"].get("schema") or {"type": "object"})
    return None


def call_delta(
    index: int, *, arguments: str = "", call_id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """One ``delta.tool_calls`` entry: the first of a call carries its id and name."""
    delta: dict[str, Any] = {"index": index}
    function: dict[str, Any] = {"arguments": arguments}
    if call_id is not None:
        delta["id"], delta["type"] = call_id, "function"
    if name is not None:
        function["name"] = name
    delta["function"] = function
    return delta


class CallArrayReader:
    """Reads the constrained JSON array as it streams: each element, once complete,
    becomes a call (id, name, arguments as compact JSON)."""

    def __init__(self) -> None:
        self.buffer = ""
        self.pos = 0
        self.opened = False
        self.calls: list[dict[str, Any]] = []
        self._decoder = json.JSONDecoder()

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The OpenAI deltas of the calls this text completes."""
        self.buffer += text
        deltas: list[dict[str, Any]] = []
        while (element := self._next()) is not None:
            index = len(self.calls)
            arguments = json.dumps(element["parameters"], ensure_ascii=False)
            call: dict[str, Any] = {
                "id": new_call_id(),
                "type": "function",
                "function": {"name": element["name"], "arguments": arguments},
            }
            self.calls.append(call)
            deltas.append(call_delta(index, call_id=call["id"], name=element["name"]))
            deltas.append(call_delta(index, arguments=arguments))
        return deltas

    def _next(self) -> dict[str, Any] | None:
        rest = self.buffer[self.pos :]
        stripped = rest.lstrip()
        skipped = len(rest) - len(stripped)
        if not self.opened:
            if not stripped.startswith("["):
                return None
            self.opened, self.pos = True, self.pos + skipped + 1
            return self._next()
        if stripped.startswith(","):
            self.pos += skipped + 1
            return self._next()
        if not stripped.startswith("{"):
            return None
        try:
            element, end = self._decoder.raw_decode(stripped)
        except json.JSONDecodeError:  # not complete yet
            return None
        self.pos += skipped + end
        if not isinstance(element, dict) or not isinstance(element.get("name"), str):
            raise ValueError(f"not a tool call: {element!r}")
        return element

    def whole(self) -> tuple[dict[str, Any], ...] | None:
        return tuple(self.calls) or None


@dataclass
class ToolCallAssembly:
    """OpenAI ``delta.tool_calls`` fragments in, whole calls out (for the last chunk)."""

    calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, deltas: Sequence[Mapping[str, Any]]) -> None:
        for delta in deltas:
            call = self.calls.setdefault(
                int(delta["index"]),
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if delta.get("id"):
                call["id"] = delta["id"]
            function = delta.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""

    def whole(self) -> tuple[dict[str, Any], ...] | None:
        return tuple(self.calls[i] for i in sorted(self.calls)) or None
