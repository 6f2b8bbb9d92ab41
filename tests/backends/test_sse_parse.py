"""The incremental SSE reader: any split of the bytes gives the same events."""

from __future__ import annotations

import pytest

from backends.sse_parse import EventSplitter, ToolCallMerger, usage_of

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b'data:{"b": 2}\r\n\r\n'
    b"event: message\ndata: line one\ndata: line two\n\n"
    b"data: [DONE]\n\n"
)
EVENTS = [b'{"a": 1}', b'{"b": 2}', b"line one\nline two", b"[DONE]"]


def test_whole_stream_at_once() -> None:
    assert EventSplitter().feed(STREAM) == EVENTS


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16])
def test_any_split_gives_the_same_events(size: int) -> None:
    splitter = EventSplitter()
    events: list[bytes] = []
    for i in range(0, len(STREAM), size):
        events += splitter.feed(STREAM[i : i + size])
    assert events == EVENTS


def test_an_unfinished_event_waits_for_its_end() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b'data: {"a"') == []
    assert splitter.feed(b": 1}\n") == []
    assert splitter.feed(b"\n") == [b'{"a": 1}']


def test_usage_and_tool_calls() -> None:
    usage = usage_of(
        {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 3}}
    )
    assert usage is not None and (usage.prompt_tokens, usage.cached_tokens) == (5, 3)
    assert usage_of(None) is None
    merger = ToolCallMerger()
    merger.merge([{"index": 0, "id": "c1", "function": {"name": "get_", "arguments": '{"a'}}])
    merger.merge([{"index": 0, "function": {"name": "weather", "arguments": '": 1}'}}])
    assert merger.result() == (
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"a": 1}'},
        },
    )
    assert ToolCallMerger().result() is None
