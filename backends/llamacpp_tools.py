"""Tool calls and structured outputs on llama.cpp, by grammar-constrained decoding.

The model writes one call as ``<tool_call>{"name": "N", "arguments": ARGS}</tool_call>``,
with ARGS constrained by the function's JSON schema (llama.cpp's JSON-schema → GBNF
converter), so ``required`` and a named function always yield schema-valid arguments
unless ``max_tokens`` cuts them short. ``auto`` allows either that call or text that
does not start with ``<``; ``response_format`` constrains the text the same way.
``ToolCallReader`` turns the constrained text back into OpenAI tool-call deltas as it
streams.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from backends.messages import content_text
from backends.tool_calls import ToolPlan, new_call_id, response_schema

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_HEADER = re.compile(r'<tool_call>\{"name": "((?:[^"\\]|\\.)*)", "arguments": ')
_TAIL = "}" + CLOSE
_HOLD = len(_TAIL) + 2  # the schema rules end with at most one optional space


def _literal(text: str) -> str:
    return json.dumps(text)  # JSON's escapes are GBNF's


def build_grammar(plan: ToolPlan, response_format: Mapping[str, Any] | None) -> str | None:
    """The GBNF for this request, or None when decoding is free."""
    from llama_cpp import llama_grammar

    untyped: Any = llama_grammar  # the converter is untyped upstream
    schema = response_schema(response_format)
    if plan.mode == "none" and schema is None:
        return None
    converter = untyped.SchemaConverter(
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    rules: list[str] = []
    if plan.mode != "none":
        calls = []
        for i, function in enumerate(plan.functions):
            params = _scoped(function.get("parameters") or {"type": "object"}, f"tool{i}")
            args = converter.visit(converter.resolve_refs(params, f"tool{i}"), f"tool{i}-args")
            header = f'{OPEN}{{"name": {json.dumps(function["name"])}, "arguments": '
            calls.append(f"{_literal(header)} {args} {_literal(_TAIL)}")
        rules.append("call ::= " + " | ".join(calls))
    if schema is not None:
        scoped = _scoped(schema, "response")
        text = converter.visit(converter.resolve_refs(scoped, "response"), "response")
    else:
        rules.append(r"free ::= [^<] [^\x00]*")
        text = "free"
    root = {"forced": "call", "auto": f"call | {text}", "none": text}[plan.mode]
    return "\n".join([f"root ::= {root}", *rules, converter.format_grammar()])


def _scoped(schema: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A copy of the schema (the converter rewrites ``$ref`` in place) whose local
    definitions carry ``prefix``: the converter names a definition's rule after it, so two
    schemas that both define ``Item`` would otherwise share one rule."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("$defs", "definitions") and isinstance(value, dict):
                out[key] = {f"{prefix}-{name}": walk(sub) for name, sub in value.items()}
            elif key == "$ref" and isinstance(value, str):
                head, _, name = value.rpartition("/")
                local = head in ("#/$defs", "#/definitions")
                out[key] = f"{head}/{prefix}-{name}" if local else value
            else:
                out[key] = walk(value)
        return out

    scoped: dict[str, Any] = walk(schema)
    return scoped


def tools_system_prompt(functions: Sequence[Mapping[str, Any]]) -> str:
    listed = [{k: f[k] for k in ("name", "description", "parameters") if k in f} for f in functions]
    return (
        "You can call these tools:\n<tools>\n"
        + "\n".join(json.dumps(f) for f in listed)
        + "\n</tools>\nTo call one, answer with exactly "
        + OPEN
        + '{"name": NAME, "arguments": ARGUMENTS}'
        + CLOSE
        + "."
    )


def render_messages(
    messages: Sequence[Mapping[str, Any]], plan: ToolPlan, template: str
) -> list[dict[str, Any]]:
    """Messages a plain chat template can render: text parts joined, the history's tool
    calls and results written in the format the model is asked to use, the tools listed
    in the system turn."""
    tool_role = "'tool'" in template or '"tool"' in template
    out: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role"))
        text = content_text(message.get("content"))
        if role == "developer":
            role = "system"
        if role == "assistant" and message.get("tool_calls"):
            calls = [_call_text(c) for c in message["tool_calls"]]
            text = "\n".join([text, *calls] if text else calls)
        if role in ("tool", "function") and not tool_role:
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
            if out and out[-1]["role"] == "user" and "<tool_response>" in out[-1]["content"]:
                out[-1]["content"] += "\n" + text
                continue
        out.append({"role": role, "content": text})
    if plan.mode != "none":
        prompt = tools_system_prompt(plan.functions)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{prompt}"
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def _call_text(call: Mapping[str, Any]) -> str:
    function = call.get("function") or {}
    arguments = function.get("arguments") or "{}"
    return (
        f'{OPEN}{{"name": {json.dumps(function.get("name", ""))}, "arguments": {arguments}}}{CLOSE}'
    )


class ToolCallReader:
    """Splits constrained output into content and one tool call, as it streams."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.buffer = ""
        self.state = "text" if plan.mode == "none" else "undecided"
        self.released = 0  # of the content, or of the arguments once a call is read
        self.name: str | None = None
        self.call_id = new_call_id()
        self._args_from = 0

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """New content to send, and new tool-call deltas."""
        self.buffer += text
        if self.state == "undecided" and self.buffer:
            forced = self.plan.mode == "forced"
            self.state = "call" if forced or self.buffer.startswith("<") else "text"
        if self.state == "text":
            out, self.released = self.buffer[self.released :], len(self.buffer)
            return out, []
        if self.state != "call":
            return "", []
        deltas: list[dict[str, Any]] = []
        if self.name is None:
            match = _HEADER.match(self.buffer)
            if match is None:
                return "", []
            self.name = json.loads(f'"{match.group(1)}"')
            self._args_from = match.end()
            deltas.append(self._delta(id=self.call_id, type="function", name=self.name))
        safe = len(self.buffer) - self._args_from - _HOLD
        if safe > self.released:
            piece = self.buffer[self._args_from + self.released : self._args_from + safe]
            self.released = safe
            deltas.append(self._delta(arguments=piece))
        return "", deltas

    def finish(self) -> tuple[list[dict[str, Any]], tuple[dict[str, Any], ...] | None]:
        """The last argument delta, and every call whole (None: the model wrote text)."""
        if self.state != "call" or self.name is None:
            return [], None
        arguments = self.buffer[self._args_from :]
        if arguments.endswith(_TAIL):
            arguments = arguments[: -len(_TAIL)].rstrip()
        deltas = []
        if len(arguments) > self.released:
            deltas.append(self._delta(arguments=arguments[self.released :]))
        self.released = len(arguments)
        call = {
            "id": self.call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }
        return deltas, (call,)

    def _delta(
        self,
        *,
        arguments: str = "",
        id: str | None = None,
        type: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        delta: dict[str, Any] = {"index": 0}
        if id is not None:
            delta["id"], delta["type"] = id, type
        function: dict[str, Any] = {"arguments": arguments}
        if name is not None:
            function["name"] = name
        delta["function"] = function
        return delta
