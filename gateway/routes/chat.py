"""``POST /v1/chat/completions``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk, GenerationRequest, SamplingParams
from gateway.http import authenticate, read_body
from gateway.respond import respond
from gateway.routing import new_request_id, route
from gateway.serving import Execution
from gateway.state import get_state
from gateway.timing import begin_request, lap
from gateway.wire import chat as wire
from gateway.wire.common import parse_body


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
    state = get_state(request)
    begin_request(state.config.server.timing_header)
    principal = authenticate(request, state)  # times itself: tracing stage "auth"
    raw = await read_body(request, state.config.server.max_body_bytes)
    body = parse_body(wire.ChatCompletionRequest, raw)
    lap("parse")
    routed = await route(
        state,
        principal,
        body.model,
        to_generation(body),
        stream=body.stream,
        include_usage=body.include_usage,
        cache_control=request.headers.get("cache-control"),
        forced_tier=request.headers.get("x-tiergate-tier"),
    )
    lap("route")
    return await respond(request, Execution(state, routed), _whole, _streamed)


def _whole(run: Execution, text: str, final: Chunk) -> dict[str, Any]:
    routed = run.routed
    return wire.completion_body(routed.request_id, run.outcome.model, routed.created, text, final)


async def _streamed(run: Execution) -> AsyncIterator[dict[str, Any]]:
    rid, created, model = run.routed.request_id, run.routed.created, run.outcome.model
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
