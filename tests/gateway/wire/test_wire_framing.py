"""SSE framing is the wire format's: OpenAI's ``data:`` lines ending in ``[DONE]``, or
named events with no sentinel (Responses, Messages), each with its own error event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.errors import ApiError, UpstreamError
from gateway.wire.sse import OPENAI_SSE, named_events, sse


async def events(fail: bool) -> AsyncIterator[dict[str, Any]]:
    yield {"type": "message_start", "n": 1}
    yield {"type": "content_block_delta", "text": "hi"}
    if fail:
        raise UpstreamError("the engine failed mid-stream")


def anthropic_error(error: ApiError) -> list[dict[str, Any]]:
    return [{"type": "error", "error": {"type": "api_error", "message": error.message}}]


async def written(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([frame async for frame in stream])


async def test_named_events_carry_their_type_and_end_without_done() -> None:
    settled = []

    async def settle() -> None:
        settled.append(True)

    framing = named_events(anthropic_error)
    out = await written(sse(events(fail=False), "req-1", settle=settle, framing=framing))
    frames = out.split(b"\n\n")[:-1]
    assert [f.split(b"\n")[0] for f in frames] == [
        b"event: message_start",
        b"event: content_block_delta",
    ]
    assert orjson.loads(frames[1].split(b"\n")[1].removeprefix(b"data: "))["text"] == "hi"
    assert b"[DONE]" not in out and settled == [True]


async def test_an_error_after_the_first_byte_is_the_formats_error_event() -> None:
    out = await written(sse(events(fail=True), "req-2", framing=named_events(anthropic_error)))
    last = out.split(b"\n\n")[-2]
    assert last.startswith(b"event: error\ndata: ")
    body = orjson.loads(last.split(b"\n")[1].removeprefix(b"data: "))
    assert body == {
        "type": "error",
        "error": {"type": "api_error", "message": body["error"]["message"]},
    }
    openai = await written(sse(events(fail=True), "req-3", framing=OPENAI_SSE))
    assert openai.endswith(b"data: [DONE]\n\n")
    error = orjson.loads(openai.split(b"\n\n")[-3].removeprefix(b"data: "))
    assert set(error["error"]) == {"message", "type", "param", "code"}
