"""``POST /v1/chat/completions``, the answer side: the run's chunks to one
``chat.completion`` or to ``chat.completion.chunk`` events, and the ``CHAT`` wire format
(the request side: ``gateway.chat.protocol``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from backends.base import Chunk, Usage
from gateway.chat.protocol import CHAT_IDS, ChatCompletionRequest, to_generation
from gateway.wire.common import logprobs_body
from gateway.wire.format import Caller, RunView, SimpleFormat, Turn, plain_turn
from gateway.wire.sse import Event


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def completion_body(
    request_id: str, model: str, created: int, text: str, final: Chunk
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if final.tool_calls:
        message["tool_calls"] = [dict(c) for c in final.tool_calls]
        message["content"] = text or None
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": final.finish_reason or "stop",
                "logprobs": logprobs_body(final.logprobs),
            }
        ],
        "usage": usage_dict(final.usage or Usage(0, 0)),
    }


def chunk_body(
    request_id: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }


def usage_chunk_body(request_id: str, model: str, created: int, usage: Usage) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_dict(usage),
    }


def whole(run: RunView, text: str, final: Chunk) -> Event:
    return completion_body(run.request_id, run.model, run.created, text, final)


async def events(run: RunView, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Event]:
    rid, created, model = run.request_id, run.created, run.model
    yield chunk_body(rid, model, created, {"role": "assistant", "content": ""})
    streamed_calls = False  # an engine that streams call fragments sends no whole calls
    async for chunk in chunks:
        delta: dict[str, Any] = {}
        if chunk.text:
            delta["content"] = chunk.text
        if chunk.tool_call_deltas:
            delta["tool_calls"] = [dict(d) for d in chunk.tool_call_deltas]
            streamed_calls = True
        if chunk.logprobs:
            yield chunk_body(rid, model, created, delta, None, logprobs_body(chunk.logprobs))
        elif delta:
            yield chunk_body(rid, model, created, delta)
        if chunk.finish_reason is not None:
            final: dict[str, Any] = {}
            if chunk.tool_calls and not streamed_calls:
                final["tool_calls"] = [{"index": i, **c} for i, c in enumerate(chunk.tool_calls)]
            yield chunk_body(rid, model, created, final, chunk.finish_reason)
            if run.include_usage and chunk.usage is not None:
                yield usage_chunk_body(rid, model, created, chunk.usage)


def translate(body: ChatCompletionRequest, caller: Caller) -> Turn:
    return plain_turn(body, to_generation(body))


CHAT = SimpleFormat(ChatCompletionRequest, translate, whole, events, CHAT_IDS)
