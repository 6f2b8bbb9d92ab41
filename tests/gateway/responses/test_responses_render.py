"""The Responses renderer (``gateway.responses.render``) over typed chunks, read back by
the ``openai`` SDK's own stream accumulator (``ResponseStreamState``, what
``responses.stream()`` runs) and its event models: text then a call (as a model writes
them), calls sent only whole (a cache replay), text alone; the whole answer's Response."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from backends.base import Chunk, Usage
from gateway.errors import UpstreamError
from gateway.responses.render import Echo, ResponseEvents, whole_response

CALL = {"id": "call_1", "type": "function", "function": {"name": "ns__spawn", "arguments": "{}"}}
ECHO = Echo(
    "resp_" + "a" * 32,
    "fake-small",
    {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True},
    {"ns__spawn": ("ns", "spawn")},
)


async def feed(chunks: Sequence[Chunk]) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk


async def streamed(chunks: Sequence[Chunk]) -> tuple[list[dict[str, Any]], Any]:
    """The events, and the Response the SDK's accumulator builds from them."""
    renderer = ResponseEvents(ECHO)
    events = [event async for event in renderer.events(feed(chunks))]
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))  # type: ignore[arg-type]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    completed = state._completed_response  # what get_final_response() returns
    assert completed is not None and renderer.final is not None
    assert completed.id == renderer.final["id"]
    return events, completed


async def test_text_then_a_streamed_call() -> None:
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "ns__spawn"}}
    events, response = await streamed(
        [
            Chunk(text="Let me"),
            Chunk(text=" check."),
            Chunk(tool_call_deltas=(head,)),
            Chunk(tool_call_deltas=({"index": 0, "function": {"arguments": "{"}},)),
            Chunk(tool_call_deltas=({"index": 0, "function": {"arguments": "}"}},)),
            Chunk(finish_reason="tool_calls", usage=Usage(5, 3), tool_calls=(CALL,)),
        ]
    )
    message, call = response.output
    assert message.type == "message" and message.content[0].text == "Let me check."
    assert (call.type, call.namespace, call.name, call.arguments) == (
        "function_call",
        "ns",
        "spawn",
        "{}",
    )
    assert call.call_id == "call_1" and response.usage.output_tokens == 3
    kinds = [e["type"] for e in events]
    assert kinds.index("response.output_item.done") < kinds.index(
        "response.function_call_arguments.delta"
    )
    assert kinds[-1] == "response.completed"


async def test_calls_sent_only_whole() -> None:
    events, response = await streamed(
        [
            Chunk(
                finish_reason="tool_calls",
                usage=Usage(5, 1),
                tool_calls=(CALL, {**CALL, "id": "call_2"}),
            )
        ]
    )
    assert [(o.type, o.call_id) for o in response.output] == [
        ("function_call", "call_1"),
        ("function_call", "call_2"),
    ]
    assert [e["type"] for e in events].count("response.function_call_arguments.done") == 2


@pytest.mark.parametrize("finish", ["stop", "length"])
async def test_text_alone_and_cut_short(finish: str) -> None:
    renderer = ResponseEvents(ECHO)
    chunks = [Chunk(text="Hi"), Chunk(finish_reason=finish, usage=Usage(1, 1))]
    events = [e async for e in renderer.events(feed(chunks))]
    last = construct_type(type_=ResponseStreamEvent, value=events[-1])
    assert last.type == ("response.completed" if finish == "stop" else "response.incomplete")  # type: ignore[union-attr]
    response: Response = last.response  # type: ignore[union-attr]
    assert response.output_text == "Hi"
    if finish == "length":
        assert response.status == "incomplete"
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"


async def test_an_error_after_the_first_event() -> None:
    renderer = ResponseEvents(ECHO)
    events = [e async for e in renderer.events(feed([Chunk(text="Hi")]))]
    failure = renderer.failed(UpstreamError("the model failed while generating"))
    error, failed = (construct_type(type_=ResponseStreamEvent, value=e) for e in failure)
    assert error.type == "error" and error.code == "upstream_error"  # type: ignore[union-attr]
    assert failed.type == "response.failed" and failed.response.status == "failed"  # type: ignore[union-attr]
    assert failure[0]["sequence_number"] == len(events)


def test_the_whole_answer_is_the_streamed_one() -> None:
    final = Chunk(finish_reason="tool_calls", usage=Usage(5, 3), tool_calls=(CALL,))
    body = whole_response(ECHO, "Let me check.", final)
    response = Response.model_validate(body)
    message, call = response.output
    assert message.content[0].text == "Let me check."  # type: ignore[union-attr]
    assert (call.namespace, call.name) == ("ns", "spawn")  # type: ignore[union-attr]
    assert response.status == "completed" and response.usage is not None
