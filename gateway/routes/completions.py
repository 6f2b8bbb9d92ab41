"""``POST /v1/completions`` (legacy text completions)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk, GenerationRequest, SamplingParams
from gateway.deps import TenantDep
from gateway.errors import InvalidRequest
from gateway.http import TracedRoute
from gateway.openapi import GENERATION_ERRORS, request_body
from gateway.respond import generate
from gateway.routing import new_request_id
from gateway.serving import Execution
from gateway.wire import completions as wire
from gateway.wire.chat import usage_chunk_body

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this endpoint


def to_generation(body: wire.CompletionRequest) -> GenerationRequest:
    try:
        prompt = body.prompt_text()
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="prompt") from None
    return GenerationRequest(
        request_id=new_request_id("cmpl"),
        model=body.model,
        sampling=SamplingParams(
            max_tokens=body.max_tokens or DEFAULT_MAX_TOKENS,
            temperature=body.temperature,
            top_p=body.top_p,
            seed=body.seed,
            stop=body.stop_tuple(),
            frequency_penalty=body.frequency_penalty,
            presence_penalty=body.presence_penalty,
        ),
        prompt=prompt,
        passthrough=body.passthrough(),
    )


router = APIRouter(route_class=TracedRoute, tags=["v1"], responses=GENERATION_ERRORS)


@router.post(
    "/v1/completions", name="text_completion", openapi_extra=request_body(wire.CompletionRequest)
)
async def completions(request: Request, call: TenantDep) -> Response:
    return await generate(
        request,
        call.state,
        call.principal,
        wire.CompletionRequest,
        to_generation,
        _whole,
        _streamed,
    )


def _whole(run: Execution, text: str, final: Chunk) -> dict[str, Any]:
    routed = run.routed
    return wire.completion_body(routed.request_id, run.model, routed.created, text, final)


async def _streamed(run: Execution) -> AsyncIterator[dict[str, Any]]:
    rid, created, model = run.routed.request_id, run.routed.created, run.model
    async for chunk in run.chunks():
        if chunk.text:
            yield wire.chunk_body(rid, model, created, chunk.text)
        if chunk.finish_reason is not None:
            yield wire.chunk_body(rid, model, created, "", chunk.finish_reason)
            if run.routed.include_usage and chunk.usage is not None:
                usage = usage_chunk_body(rid, model, created, chunk.usage)
                yield {**usage, "object": "text_completion"}
