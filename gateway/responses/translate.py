"""A Responses body (and the conversation it continues) → one ``GenerationRequest``.

Input items become chat messages: ``instructions`` a system message first; a message
item keeps its role, its text parts collapse to a string (as chat's string content, so
the same question is the same cache entry on either endpoint), images and files become
chat's parts; ``function_call`` items join the assistant turn as its ``tool_calls``;
``function_call_output`` items become ``tool`` messages. A ``reasoning`` item is dropped
and named (no tier here reads reasoning). Function tools lose Responses' flat shape,
namespace tools are flattened (``NAMESPACE__NAME``), hosted tools follow the tenant's
compatibility policy (``gateway.wire.compat``).

Every item is also kept in the shape ``GET /v1/responses/{id}/input_items`` lists, with
an id, for the stored conversation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.base import GenerationRequest, SamplingParams
from gateway.errors import InvalidRequest
from gateway.responses.protocol import (
    RUNNABLE_TOOLS,
    CreateResponse,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    MessageItem,
    NamespaceTool,
    OtherItem,
    ReasoningItem,
)
from gateway.types import IdShape
from gateway.wire.compat import Compat, Mode, hosted_tools, unsupported

Item = dict[str, Any]
NAMESPACE_SEPARATOR = "__"
_TEXT_PARTS = {"input_text", "output_text"}
RESPONSE_IDS = IdShape("resp_")


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(16).hex()}"


@dataclass(frozen=True, slots=True)
class Translation:
    """What the engine sees, and what the Response echoes and the store keeps."""

    generation: GenerationRequest
    items: tuple[Item, ...]  # the whole input, continued conversation first, with ids
    compat: Compat
    tools: tuple[Item, ...]  # as the Response echoes them (the hosted ones removed)
    tool_choice: str | Item
    namespaces: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def to_generation(
    body: CreateResponse, history: Sequence[Item] = (), mode: Mode = "lenient"
) -> Translation:
    """``history``: the stored conversation ``previous_response_id`` continues."""
    compat = body.compat()
    items, dropped = normalized_input(body)
    compat = compat.merged(dropped)
    tools, echo, namespaces, stripped = _tools(body, mode)
    compat = compat.merged(stripped)
    choice = _tool_choice(body.tool_choice, echo)
    conversation = (*history, *items)
    _check_outputs(conversation, len(history))
    messages = chat_messages(conversation, namespaces)
    if not messages:
        raise InvalidRequest("input: no message left to answer", param="input")
    if body.instructions:
        messages.insert(0, {"role": "system", "content": body.instructions})
    generation = GenerationRequest(
        request_id=RESPONSE_IDS.new(),
        model=body.model,
        sampling=SamplingParams(
            max_tokens=body.max_output_tokens, temperature=body.temperature, top_p=body.top_p
        ),
        messages=tuple(messages),
        tools=tools or None,
        tool_choice=_chat_choice(choice) if tools else None,
        response_format=_response_format(body),
        parallel_tool_calls=body.parallel_tool_calls if tools else None,
    )
    echoed = choice if isinstance(choice, str) or tools else "auto"
    return Translation(generation, conversation, compat, echo, echoed, namespaces)


def _check_outputs(conversation: Sequence[Item], first_input: int) -> None:
    """Every ``function_call_output`` answers a ``function_call`` before it (in the stored
    conversation or this input), as OpenAI checks."""
    called: set[str] = set()
    for index, item in enumerate(conversation):
        if item["type"] == "function_call":
            called.add(item["call_id"])
        elif item["type"] == "function_call_output" and item["call_id"] not in called:
            raise InvalidRequest(
                f"No tool call found for function call output with call_id {item['call_id']}.",
                param=f"input[{index - first_input}].call_id" if index >= first_input else "input",
            )


def normalized_input(body: CreateResponse) -> tuple[list[Item], Compat]:
    """This request's input items with ids, as stored; reasoning items left out."""
    if isinstance(body.input, str):
        text = {"type": "input_text", "text": body.input}
        return [_message("user", [text])], Compat()
    items: list[Item] = []
    ignored: list[str] = []
    for index, item in enumerate(body.input):
        if isinstance(item, MessageItem):
            items.append(_message(item.role, _parts(item, index), item.id))
        elif isinstance(item, FunctionCallItem):
            items.append(_call(item))
        elif isinstance(item, FunctionCallOutputItem):
            items.append(_call_output(item, index))
        elif isinstance(item, ReasoningItem):
            ignored.append(f"input[{index}]")
        else:
            assert isinstance(item, OtherItem)
            raise unsupported(f"input[{index}]", f"items of type {item.type!r} are not served")
    return items, Compat(ignored=tuple(ignored))


def _message(role: str, content: list[Item], item_id: str | None = None) -> Item:
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "role": role,
        "status": "completed",
        "content": content,
    }


def _parts(item: MessageItem, index: int) -> list[Item]:
    kind = "output_text" if item.role == "assistant" else "input_text"
    if isinstance(item.content, str):
        part: Item = {"type": kind, "text": item.content}
        if kind == "output_text":
            part["annotations"] = []
        return [part]
    for j, part in enumerate(item.content):
        where = f"input[{index}].content[{j}]"
        kind = str(part.get("type"))
        if kind in _TEXT_PARTS and not isinstance(part.get("text"), str):
            raise InvalidRequest(f"{where}: a text part needs a string `text`", param=where)
        if kind in ("input_image", "input_file") and part.get("file_id"):
            raise unsupported(f"{where}.file_id", "the Files API is not served")
        if kind == "input_image" and not isinstance(part.get("image_url"), str):
            raise InvalidRequest(f"{where}: an image part needs `image_url`", param=where)
        if kind not in (*_TEXT_PARTS, "input_image", "input_file", "refusal"):
            raise unsupported(f"{where}.type", f"content parts of type {kind!r} are not served")
    return list(item.content)


def _call(item: FunctionCallItem) -> Item:
    call: Item = {
        "id": item.id or new_id("fc"),
        "type": "function_call",
        "call_id": item.call_id,
        "name": item.name,
        "arguments": item.arguments,
        "status": "completed",
    }
    if item.namespace:
        call["namespace"] = item.namespace
    return call


def _call_output(item: FunctionCallOutputItem, index: int) -> Item:
    output = item.output
    if not isinstance(output, str):
        for j, part in enumerate(output):
            if part.get("type") != "input_text":
                where = f"input[{index}].output[{j}]"
                raise unsupported(where, "a tool's output is text here")
    return {
        "id": item.id or new_id("fco"),
        "type": "function_call_output",
        "call_id": item.call_id,
        "output": output,
        "status": "completed",
    }


def chat_messages(items: Sequence[Item], namespaces: Mapping[str, tuple[str, str]]) -> list[Item]:
    """Stored-shape items → chat messages for the engine."""
    flat = {pair: name for name, pair in namespaces.items()}
    messages: list[Item] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            messages.append({"role": item["role"], "content": _chat_content(item["content"])})
        elif kind == "function_call":
            name = item["name"]
            if item.get("namespace"):
                name = flat.get((item["namespace"], name), item["namespace"] + "__" + name)
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": name, "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item["output"]
            text = output if isinstance(output, str) else "".join(p["text"] for p in output)
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
    return messages


def _chat_content(parts: list[Item]) -> str | list[Item]:
    if all(p.get("type") in _TEXT_PARTS for p in parts):
        return "\n".join(str(p["text"]) for p in parts)
    chat: list[Item] = []
    for part in parts:
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            chat.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            chat.append({"type": "refusal", "refusal": part.get("refusal", "")})
        elif kind == "input_image":
            image = {"url": part["image_url"], "detail": part.get("detail") or "auto"}
            chat.append({"type": "image_url", "image_url": image})
        else:
            document = {k: part[k] for k in ("file_data", "filename") if part.get(k)}
            chat.append({"type": "file", "file": document})
    return chat


def _tools(
    body: CreateResponse, mode: Mode
) -> tuple[tuple[Item, ...], tuple[Item, ...], dict[str, tuple[str, str]], Compat]:
    """The chat tools the engine sees, the tools the Response echoes, the flattened
    namespace names, and the hosted tools removed."""
    given = body.tools or []
    kept, stripped = hosted_tools([t.type for t in given], RUNNABLE_TOOLS, mode)
    chat: list[Item] = []
    echo: list[Item] = []
    namespaces: dict[str, tuple[str, str]] = {}
    for index in kept:
        tool = given[index]
        echo.append(tool.model_dump(exclude_none=True))
        if isinstance(tool, FunctionTool):
            chat.append(_chat_tool(tool, tool.name))
            continue
        assert isinstance(tool, NamespaceTool)
        for inner in tool.tools:
            name = f"{tool.name}{NAMESPACE_SEPARATOR}{inner.name}"
            if len(name) > 64:
                raise unsupported(f"tools[{index}].name", f"{name!r} is over 64 characters")
            namespaces[name] = (tool.name, inner.name)
            chat.append(_chat_tool(inner, name))
    names = [t["function"]["name"] for t in chat]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools: two tools have the same name", param="tools")
    return tuple(chat), tuple(echo), namespaces, stripped


def _chat_tool(tool: FunctionTool, name: str) -> Item:
    function: Item = {"name": name}
    if tool.description is not None:
        function["description"] = tool.description
    function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def _tool_choice(choice: str | Item | None, tools: Sequence[Item]) -> str | Item:
    """The choice as the Response echoes it; one naming a tool not offered is a 400."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice == "required" and not tools:
            raise InvalidRequest("tool_choice required needs tools", param="tool_choice")
        return choice
    if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
        raise unsupported("tool_choice", f"a choice of type {choice.get('type')!r} is not served")
    offered = {t["name"] for t in tools if t["type"] == "function"}
    if choice["name"] not in offered:
        raise InvalidRequest(
            f"tool_choice names {choice['name']!r}, not in tools", param="tool_choice"
        )
    return {"type": "function", "name": choice["name"]}


def _chat_choice(choice: str | Item) -> str | Item:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def _response_format(body: CreateResponse) -> Item | None:
    form = body.text.format if body.text is not None else None
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return {"type": "json_object"}
    schema: Item = {"name": form.name, "schema": form.schema_}
    if form.description is not None:
        schema["description"] = form.description
    if form.strict is not None:
        schema["strict"] = form.strict
    return {"type": "json_schema", "json_schema": schema}
