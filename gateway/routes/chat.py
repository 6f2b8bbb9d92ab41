"""``POST /v1/chat/completions``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk, GenerationRequest, SamplingParams
from gateway.respond import generate
from gateway.routing import new_request_id
from gateway.serving import Execution
from gateway.wire import chat as wire


def to_generation(body: wire.ChatCompletionRequest) -> GenerationRequest:
    return GenerationRequest(
        request_id=new_request_id("chatcmpl"),
        model=body.model,
        sampling=SamplingParams(
            max_tokens=body.token_limit,
            temperature=body.temperature,
            top_p=body.top_p,
            seed=body.seed,
            stop=body.stop_tuple(),
        ),
        messages=tuple(m.as_dict() for m in body.messages),
        tools=tuple(body.tools) if body.tools else None,
        tool_choice=body.tool_choice,
        response_format=body.response_format,
    )


async def chat_completions(request: Request) -> Response:
    return await generate(request, wire.ChatCompletionRequest, to_generation, _whole, _streamed)


def _whole(run: Execution, text: str, final: Chunk) -> dict[str, Any]:
    routed = run.routed
    return wire.completion_body(routed.request_id, run.model, routed.created, text, final)


async def _streamed(run: Execution) -> AsyncIterator[dict[str, Any]]:
    rid, created, model = run.routed.request_id, run.routed.created, run.model
    yield wire.chunk_body(rid, model, created, {"role": "assistant", "content": ""})
    async for chunk in run.chunks():
        if chunk.text:
            yield wire.chunk_body(rid, model, created, {"content": chunk.text})
        if chunk.finish_reason is not None:
            delta: dict[str, Any] = {}
            if chunk.tool_calls:
                delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(chunk.tool_calls)]
            yield wire.chunk_body(rid, model, created, delta, chunk.finish_reason)
            if run.routed.include_usage and chunk.usage is not None:
                yield wire.usage_chunk_body(rid, model, created, chunk.usage)
