"""A Messages body → one ``GenerationRequest``, in chat's shape (so the same question is
the same exact-cache entry and the same price on either endpoint).

``system`` (a string, or text blocks) becomes the first system message, and ``system``
turns inside ``messages`` (Claude Code sends them) join it, as most chat templates take
one system message and only first. A turn's text blocks collapse to one string (chat's
string content), images become chat's ``image_url`` parts (a ``data:`` URL for a base64
source); an assistant's ``tool_use`` blocks become its ``tool_calls``, a user's
``tool_result`` blocks become ``tool`` messages before the rest of that turn.
``thinking`` blocks are dropped and named (no tier here reads them), ``cache_control``
is a hint. Custom tools become chat function tools; any other tool type follows the
tenant's compatibility policy (removed and named, or a 400 under ``compat: strict``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from backends.base import GenerationRequest, SamplingParams
from gateway.errors import InvalidRequest
from gateway.messages.protocol import CUSTOM_TOOLS, Block, MessagesRequest, ToolChoice
from gateway.types import IdShape
from gateway.wire.compat import Compat, Mode, hosted_tools, unsupported

Message = dict[str, Any]
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
TOOL_ERROR_PREFIX = "Error: "  # a tool_result with is_error: chat has no such flag
MESSAGE_IDS = IdShape("msg_", 24)


@dataclass(frozen=True, slots=True)
class Translation:
    generation: GenerationRequest
    compat: Compat


def to_generation(body: MessagesRequest, mode: Mode = "lenient") -> Translation:
    compat = body.compat()
    notes = _Notes()
    messages: list[Message] = []
    system = _system_text(body.system, "system", notes)
    systems = [system] if system is not None else []
    last = len(body.messages) - 1
    for index, turn in enumerate(body.messages):
        where = f"messages[{index}]"
        if turn.role == "system":  # most chat templates take one system message, first
            systems.append(_system_text(turn.content, where, notes) or "")
            continue
        if turn.content == [] and not (index == last and turn.role == "assistant"):
            raise InvalidRequest(
                f"{where}.content: all messages must have non-empty content except for the "
                "optional final assistant message",
                param=f"{where}.content",
            )
        answered = _called(body.messages[index - 1].content) if index else set()
        messages.extend(_turn(turn.role, turn.content, where, notes, answered))
    if not messages:
        raise InvalidRequest("messages: no turn left to answer", param="messages")
    if systems:
        messages.insert(0, {"role": "system", "content": "\n".join(systems)})
    tools, stripped = _tools(body, mode, notes)
    choice, parallel = _tool_choice(body.tool_choice, tools)
    passthrough = {"top_k": body.top_k} if body.top_k is not None else {}
    generation = GenerationRequest(
        request_id=MESSAGE_IDS.new(),
        model=body.model,
        sampling=SamplingParams(
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            stop=tuple(body.stop_sequences or ()),
        ),
        messages=tuple(messages),
        tools=tools or None,
        tool_choice=choice,
        response_format=body.output_format(),
        parallel_tool_calls=parallel,
        passthrough=passthrough,
    )
    return Translation(generation, compat.merged(stripped).merged(notes.compat()))


class _Notes:
    """What the translation accepted without honouring, in the order it met it."""

    def __init__(self) -> None:
        self.ignored: list[str] = []

    def add(self, name: str) -> None:
        if name not in self.ignored:
            self.ignored.append(name)

    def compat(self) -> Compat:
        return Compat(ignored=tuple(self.ignored))


def _system_text(system: str | list[Block] | None, where: str, notes: _Notes) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    texts = []
    for j, block in enumerate(system):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InvalidRequest(f"{where}[{j}]: a system block is a text block", param=where)
        _hints(block, notes)
        texts.append(block["text"])
    return "\n".join(texts) or None


def _hints(block: Block, notes: _Notes) -> None:
    if block.get("cache_control") is not None:
        notes.add("cache_control")
    if block.get("citations"):
        notes.add("citations")


def _called(content: str | list[Block]) -> set[str]:
    """The ids of the ``tool_use`` blocks in a turn: what the next turn's results answer."""
    if isinstance(content, str):
        return set()
    return {
        b["id"] for b in content if b.get("type") == "tool_use" and isinstance(b.get("id"), str)
    }


def _turn(
    role: str, content: str | list[Block], where: str, notes: _Notes, answered: set[str]
) -> list[Message]:
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    parts: list[Block] = []
    calls: list[Block] = []
    results: list[Message] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = block.get("type")
        _hints(block, notes)
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise InvalidRequest(f"{at}: a text block needs a string `text`", param=at)
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_call(block, at))
        elif kind == "tool_result" and role == "user":
            results.append(_result(block, at, notes, answered))
        elif kind in _DROPPED_BLOCKS and role == "assistant":
            notes.add(at)
        else:
            raise unsupported(f"{at}.type", f"{kind!r} blocks are not served in a {role} turn")
    turn: list[Message] = list(results)
    if role == "assistant":
        if parts or calls:
            message: Message = {"role": "assistant", "content": _content(parts, at=where)}
            if calls:
                message["tool_calls"] = calls
                message["content"] = message["content"] or None
            turn.append(message)
    elif parts or not results:
        turn.append({"role": "user", "content": _content(parts, at=where)})
    return turn


def _content(parts: list[Block], at: str) -> str | list[Block]:
    """Text blocks only: one string (as chat sends it); else chat's parts."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _image(block: Block, at: str) -> Block:
    source = block.get("source")
    if not isinstance(source, dict):
        raise InvalidRequest(f"{at}: an image block needs a `source`", param=f"{at}.source")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if media not in _IMAGE_TYPES or not isinstance(data, str):
            raise InvalidRequest(
                f"{at}.source: a base64 image needs `data` and a media_type of "
                + ", ".join(sorted(_IMAGE_TYPES)),
                param=f"{at}.source",
            )
        url = f"data:{media};base64,{data}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    elif kind == "file":
        raise unsupported(f"{at}.source", "the Files API is not served")
    else:
        raise InvalidRequest(f"{at}.source: a base64 or url source", param=f"{at}.source")
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


def _call(block: Block, at: str) -> Block:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise InvalidRequest(f"{at}: a tool_use block needs `id`, `name` and `input`", param=at)
    encoded = orjson.dumps(arguments).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": encoded}}


def _result(block: Block, at: str, notes: _Notes, answered: set[str]) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise InvalidRequest(f"{at}: a tool_result needs `tool_use_id`", param=at)
    if call_id not in answered:  # Anthropic's rule: the call is in the message before
        raise InvalidRequest(
            f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. Each "
            "`tool_result` block must have a corresponding `tool_use` block in the previous "
            "message.",
            param=f"{at}.tool_use_id",
        )
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces = []
        for k, inner in enumerate(content):
            if not isinstance(inner, dict) or inner.get("type") != "text":
                raise unsupported(f"{at}.content[{k}]", "a tool's result is text here")
            _hints(inner, notes)
            pieces.append(str(inner.get("text", "")))
        text = "\n".join(pieces)
    else:
        raise InvalidRequest(f"{at}.content: a string or a list of blocks", param=at)
    if block.get("is_error"):
        text = TOOL_ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _tools(body: MessagesRequest, mode: Mode, notes: _Notes) -> tuple[tuple[Block, ...], Compat]:
    given = body.tools or []
    kinds = [t.type or "custom" for t in given]
    kept, stripped = hosted_tools(kinds, CUSTOM_TOOLS, mode)
    tools: list[Block] = []
    for index in kept:
        tool = given[index]
        for name in sorted(tool.model_extra or {}):  # cache_control, defer_loading…
            if name == "cache_control":
                notes.add("cache_control")
            elif name in ("defer_loading", "eager_input_streaming", "input_examples"):
                notes.add(f"tools[{index}].{name}")
            else:
                raise unsupported(f"tools[{index}].{name}", "unknown field")
        if tool.input_schema is None:
            raise InvalidRequest(f"tools[{index}]: needs `input_schema`", param=f"tools[{index}]")
        function: Block = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.input_schema
        if tool.strict is not None:
            function["strict"] = tool.strict
        tools.append({"type": "function", "function": function})
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools: two tools have the same name", param="tools")
    return tuple(tools), stripped


def _tool_choice(choice: ToolChoice | None, tools: Sequence[Block]) -> tuple[Any, bool | None]:
    """Chat's ``tool_choice`` and ``parallel_tool_calls`` (None: the default)."""
    if choice is None or not tools:
        return None, None
    parallel = False if choice.disable_parallel_tool_use else None
    if choice.type == "auto":
        return "auto", parallel
    if choice.type == "any":
        return "required", parallel
    if choice.type == "none":
        return "none", None
    offered = {t["function"]["name"] for t in tools}
    if choice.name is None or choice.name not in offered:
        raise InvalidRequest(
            f"tool_choice names {choice.name!r}, not in tools", param="tool_choice.name"
        )
    return {"type": "function", "function": {"name": choice.name}}, parallel
