"""Chat on SGLang the way SGLang's own OpenAI server shapes it, for an engine that lives
in another process (``backends.sglang_worker``).

Request side: the messages the chat template gets (text parts joined, ``content: null``
as ``""``, ``developer`` as ``system``, past calls' ``arguments`` as objects: templates
write them with ``tojson``), the tools the template lists (none for ``tool_choice:
"none"``, only the named one for a named choice) and the sampling constraint, SGLang's
``json_schema`` param: ``response_format``'s schema, or for ``required`` and a named
function the call array of ``backends.tool_calls`` (schema-valid arguments by
construction). ``auto`` is unconstrained: the worker runs SGLang's
``FunctionCallParser`` (the parser named in the engine's YAML) over the text and sends
the ``ToolCallItem`` objects it reads.

Response side: ``CallStream`` turns those items, or the constrained array, into OpenAI
``delta.tool_calls`` and, at the end, the whole calls (reconciled with the parser's
one-shot reading of the full text, so stream and non-stream agree).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.base import GenerationRequest
from backends.messages import PART_MODALITIES, content_text
from backends.tool_calls import (
    CallArrayReader,
    ToolCallAssembly,
    call_array_schema,
    call_delta,
    new_call_id,
    response_schema,
    tool_plan,
)

log = logging.getLogger(__name__)

# What every SGLang engine honours; tools need ``tool_call_parser`` in the engine's options.
BASE_CAPABILITIES = frozenset({"response_format", "frequency_penalty", "presence_penalty"})
TOOL_CAPABILITIES = frozenset({"tools", "tool_choice", "parallel_tool_calls"})


@dataclass(frozen=True, slots=True)
class SglangChat:
    """One chat request as the worker takes it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None  # listed by the chat template
    reading: str  # "text", "parser" (SGLang's FunctionCallParser) or "array" (constrained)
    sampling: dict[str, Any] = field(default_factory=dict)  # constraint sampling params
    parallel: bool = True


def prepare(request: GenerationRequest) -> SglangChat:
    """The worker's view of a chat request; a ``ValueError`` names what cannot be served."""
    plan = tool_plan(request.tools, request.tool_choice)
    parallel = request.parallel_tool_calls is not False
    messages = template_messages(request.messages or ())
    sampling: dict[str, Any] = {}
    schema = response_schema(request.response_format)
    if schema is not None:
        sampling["json_schema"] = json.dumps(schema)
    if plan.mode == "none":
        return SglangChat(messages, None, "text", sampling, parallel)
    # As SGLang's server: tool-call markers may be special tokens, the parser needs them.
    sampling["skip_special_tokens"] = False
    tools = [{"type": "function", "function": dict(f)} for f in plan.functions]
    if plan.mode == "forced":
        schema = call_array_schema(plan.functions, parallel=parallel)
        sampling["json_schema"] = json.dumps(schema)  # a call: no text to hold to a format
        return SglangChat(messages, tools, "array", sampling, parallel)
    for i, tool in enumerate(request.tools or ()):
        if tool["function"].get("strict"):
            raise ValueError(
                f"`tools[{i}].function.strict` is only guaranteed with tool_choice "
                "`required` or a named function on this backend (`auto` is not constrained)"
            )
    return SglangChat(messages, tools, "parser", sampling, parallel)


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the shape Hugging Face chat templates read (as SGLang's server)."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        rendered = dict(message)
        if rendered.get("role") == "developer":
            rendered["role"] = "system"
        content = rendered.get("content")
        if content is None or _text_only(content):
            rendered["content"] = content_text(content)
        if rendered.get("tool_calls"):
            rendered["tool_calls"] = [
                _call_for_template(call, f"messages[{i}].tool_calls[{j}]")
                for j, call in enumerate(rendered["tool_calls"])
            ]
        out.append(rendered)
    return out


def _text_only(content: Any) -> bool:
    if isinstance(content, str):
        return False  # already as templates want it
    return all(PART_MODALITIES.get(str(p.get("type"))) == "text" for p in content)


def _call_for_template(call: Mapping[str, Any], where: str) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise ValueError(f"`{where}.function.arguments` must be a JSON object")
    function["arguments"] = arguments
    return {**call, "function": function}


class CallStream:
    """Content and OpenAI tool-call deltas from what the worker streams, then the whole
    calls for the last chunk."""

    def __init__(self, reading: str, *, parallel: bool = True) -> None:
        self.reading = reading
        self.parallel = parallel
        self.array = CallArrayReader()
        self.assembly = ToolCallAssembly()

    def feed(
        self, text: str, items: Sequence[Mapping[str, Any]] = ()
    ) -> tuple[str, list[dict[str, Any]]]:
        """``text`` is the parser's normal text (or the raw text), ``items`` its
        ``ToolCallItem`` objects as dicts (``tool_index``, ``name``, ``parameters``)."""
        if self.reading == "array":
            return "", self.array.feed(text)
        deltas = [d for item in items if (d := self._item_delta(item)) is not None]
        self.assembly.add(deltas)
        return text, deltas

    def _item_delta(self, item: Mapping[str, Any]) -> dict[str, Any] | None:
        index = int(item["tool_index"])
        if not self.parallel and index > 0:  # one call at most: later ones are dropped
            return None
        arguments = str(item.get("parameters") or "")
        if item.get("name") and index not in self.assembly.calls:  # a call's first item
            return call_delta(index, arguments=arguments, call_id=new_call_id(), name=item["name"])
        if index not in self.assembly.calls:
            return None  # arguments of a call never named: SGLang's server drops them too
        return call_delta(index, arguments=arguments) if arguments else None

    def finish(
        self, final: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], tuple[dict[str, Any], ...] | None]:
        """The deltas still owed and every call whole. ``final``: the parser's reading of
        the full text, which the streamed calls are completed (or corrected) from."""
        if self.reading == "array":
            return [], self.array.whole()
        owed: list[dict[str, Any]] = []
        for index, item in enumerate(final or ()):
            if not self.parallel and index > 0:
                break
            owed.extend(self._complete(index, str(item["name"]), str(item.get("parameters") or "")))
        self.assembly.add(owed)
        return owed, self.assembly.whole()

    def _complete(self, index: int, name: str, arguments: str) -> list[dict[str, Any]]:
        streamed = self.assembly.calls.get(index)
        if streamed is None:
            return [call_delta(index, arguments=arguments, call_id=new_call_id(), name=name)]
        sent = streamed["function"]["arguments"]
        if arguments.startswith(sent):
            rest = arguments[len(sent) :]
            return [call_delta(index, arguments=rest)] if rest else []
        # The stream went astray of the parser's own full reading: the whole call is right.
        log.warning("streamed arguments of call %d differ from the parsed call", index)
        streamed["function"]["arguments"] = ""
        return [call_delta(index, arguments=arguments)]
