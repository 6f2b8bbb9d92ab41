"""``POST /v1/chat/completions``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk, GenerationRequest, SamplingParams
from gateway.deps import TenantDep
from gateway.http import TracedRoute
from gateway.openapi import GENERATION_ERRORS, request_body
from gateway.respond import generate
from gateway.routing import new_request_id
from gateway.serving import Execution
from gateway.wire import chat as wire
from gateway.wire.common import logprobs_body


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
            frequency_penalty=body.frequency_penalty,
            presence_penalty=body.presence_penalty,
        ),
        messages=tuple(m.as_dict() for m in body.messages),
        tools=body.tool_dicts(),
        tool_choice=body.tool_choice_value(),
        response_format=body.response_format_dict(),
        parallel_tool_calls=body.parallel_tool_calls,
        logprobs=bool(body.logprobs),
        top_logprobs=body.top_logprobs,
        passthrough=body.passthrough(),
    )


router = APIRouter(route_class=TracedRoute, tags=["v1"], responses=GENERATION_ERRORS)


@router.post(
    "/v1/chat/completions", name="chat", openapi_extra=request_body(wire.ChatCompletionRequest)
)
async def chat_completions(request: Request, call: TenantDep) -> Response:
    return await generate(
        request,
        call.state,
        call.principal,
        wire.ChatCompletionRequest,
        to_generation,
        _whole,
        _streamed,
    )


def _whole(run: Execution, text: str, final: Chunk) -> dict[str, Any]:
    routed = run.routed
    return wire.completion_body(routed.request_id, run.model, routed.created, text, final)


async def _streamed(run: Execution) -> AsyncIterator[dict[str, Any]]:
    rid, created, model = run.routed.request_id, run.routed.created, run.model
    yield wire.chunk_body(rid, model, created, {"role": "assistant", "content": ""})
    streamed_calls = False  # an engine that streams call fragments sends no whole calls
    async for chunk in run.chunks():
        delta: dict[str, Any] = {}
        if chunk.text:
            delta["content"] = chunk.text
        if chunk.tool_call_deltas:
            delta["tool_calls"] = [dict(d) for d in chunk.tool_call_deltas]
            streamed_calls = True
        if chunk.logprobs:
            yield wire.chunk_body(rid, model, created, delta, None, logprobs_body(chunk.logprobs))
        elif delta:
            yield wire.chunk_body(rid, model, created, delta)
        if chunk.finish_reason is not None:
            final: dict[str, Any] = {}
            if chunk.tool_calls and not streamed_calls:
                final["tool_calls"] = [{"index": i, **c} for i, c in enumerate(chunk.tool_calls)]
            yield wire.chunk_body(rid, model, created, final, chunk.finish_reason)
            if run.routed.include_usage and chunk.usage is not None:
                yield wire.usage_chunk_body(rid, model, created, chunk.usage)
