"""The Messages translation (``gateway.messages.translate``) and rendering
(``gateway.messages.render``) as pure functions: what the engine is asked for each
kind of block, and the events a run's chunks become."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from backends.base import Chunk, Usage
from gateway.errors import InvalidRequest, Overloaded, RateLimited
from gateway.messages.protocol import MessagesRequest
from gateway.messages.render import events, whole
from gateway.messages.translate import to_generation
from gateway.wire.common import parse_body
from gateway.wire.errors import anthropic_body, anthropic_status

PNG = "iVBORw0KGgo="


def body(**fields: Any) -> MessagesRequest:
    fields.setdefault("model", "small")
    fields.setdefault("max_tokens", 16)
    fields.setdefault("messages", [{"role": "user", "content": "hi"}])
    return parse_body(MessagesRequest, orjson.dumps(fields))


def test_text_blocks_and_system_are_chats_strings() -> None:
    turn = to_generation(
        body(
            system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
                {"role": "system", "content": "Later rule."},
            ],
            stop_sequences=["END"],
            temperature=0.5,
        )
    )
    generation = turn.generation
    assert generation.messages == (
        {"role": "system", "content": "Be brief.\nBe kind.\nLater rule."},
        {"role": "user", "content": "a\nb"},
    )
    assert generation.sampling.stop == ("END",) and generation.sampling.max_tokens == 16
    assert generation.sampling.temperature == 0.5 and generation.request_id.startswith("msg_")
    assert turn.compat.named == ()


def test_images_become_chats_image_parts() -> None:
    turn = to_generation(
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "https://example.com/a.jpg"},
                        },
                    ],
                }
            ]
        )
    )
    [message] = turn.generation.messages or ()
    assert message["content"] == [
        {"type": "text", "text": "What is this?"},
        {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        },
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "auto"}},
    ]


def test_tool_use_and_tool_result_become_tool_calls_and_tool_messages() -> None:
    turn = to_generation(
        body(
            tools=[
                {
                    "name": "get",
                    "input_schema": {"type": "object"},
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            tool_choice={"type": "tool", "name": "get", "disable_parallel_tool_use": True},
            messages=[
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "Calling."},
                        {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"a": 1}},
                        {"type": "tool_use", "id": "toolu_2", "name": "get", "input": {"a": 2}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "ok"}],
                        },
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "content": "bad",
                            "is_error": True,
                        },
                        {"type": "text", "text": "and then?"},
                    ],
                },
            ],
        )
    )
    generation = turn.generation
    assert generation.messages == (
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Calling.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"a":1}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"a":2}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "ok"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: bad"},
        {"role": "user", "content": "and then?"},
    )
    assert generation.tools == (
        {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}},
    )
    assert generation.tool_choice == {"type": "function", "function": {"name": "get"}}
    assert generation.parallel_tool_calls is False
    assert turn.compat.named == ("messages[1].content[0]", "cache_control")


@pytest.mark.parametrize(
    ("choice", "expected"), [("auto", "auto"), ("any", "required"), ("none", "none")]
)
def test_tool_choice(choice: str, expected: str) -> None:
    tools = [{"name": "get", "input_schema": {"type": "object"}}]
    generation = to_generation(body(tools=tools, tool_choice={"type": choice})).generation
    assert generation.tool_choice == expected and generation.parallel_tool_calls is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "document"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages[0].content[0].source",
        ),
        ({"tools": [{"name": "x", "input_schema": {}, "made_up": 1}]}, "tools[0].made_up"),
        ({"output_config": {"effort": "low", "task_budget": 3}}, "output_config.task_budget"),
        (
            {
                "tools": [{"name": "x", "input_schema": {}}],
                "tool_choice": {"type": "tool", "name": "y"},
            },
            "tool_choice.name",
        ),
    ],
)
def test_what_cannot_be_served_is_a_400_naming_it(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        to_generation(body(**fields))
    assert refused.value.param == param


def test_hosted_tools_are_stripped_or_refused_under_strict() -> None:
    tools = [{"name": "web_search", "type": "web_search_20250305"}]
    assert to_generation(body(tools=tools)).compat.named == ("tools:web_search_20250305",)
    with pytest.raises(InvalidRequest) as refused:
        to_generation(body(tools=tools), "strict")
    assert refused.value.param == "tools[0]"


def test_output_config_format_is_chats_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    turn = to_generation(body(output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert turn.generation.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }
    assert turn.compat.named == ()


class View:
    request_id = "msg_1"
    created = 0
    model = "m"
    include_usage = True


async def _chunks(*chunks: Chunk) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk


def test_events_for_text_then_a_streamed_call() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get"}}
    chunks = _chunks(
        Chunk(text="Hi"),
        Chunk(tool_call_deltas=(call,)),
        Chunk(tool_call_deltas=({"index": 0, "function": {"arguments": '{"a":'}},)),
        Chunk(tool_call_deltas=({"index": 0, "function": {"arguments": "1}"}},)),
        Chunk(finish_reason="tool_calls", usage=Usage(10, 3, cached_tokens=4)),
    )

    async def drain() -> list[dict[str, Any]]:
        return [e async for e in events(View(), chunks)]

    got = asyncio.run(drain())
    assert [e["type"] for e in got] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[5]["content_block"] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get",
        "input": {},
    }
    assert [e["index"] for e in got[2:9]] == [0, 0, 0, 1, 1, 1, 1]
    assert got[9]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert got[9]["usage"] == {
        "input_tokens": 6,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
        "output_tokens": 3,
    }


def test_a_whole_answer_and_its_stop_sequence() -> None:
    final = Chunk(finish_reason="stop", usage=Usage(5, 2), stop_sequence="END")
    message = whole(View(), "ab", final)
    assert message["content"] == [{"type": "text", "text": "ab"}]
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == "END"


def test_error_shapes_and_statuses() -> None:
    overloaded = Overloaded("busy", headers={"Retry-After": "2"})
    assert anthropic_status(overloaded) == 529
    assert anthropic_body(overloaded)["error"]["type"] == "overloaded_error"
    assert anthropic_body(RateLimited("slow down"), "req-9") == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
        "request_id": "req-9",
    }
