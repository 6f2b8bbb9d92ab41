"""``POST /v1/completions`` (legacy text completions)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk, GenerationRequest, SamplingParams
from gateway.errors import InvalidRequest
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


async def completions(request: Request) -> Response:
    return await generate(request, wire.CompletionRequest, to_generation, _whole, _streamed)


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
