"""``POST /v1/completions``, the answer side: the run's chunks to one ``text_completion``
or to its stream of events, and the ``COMPLETIONS`` wire format (the request side:
``gateway.completions.protocol``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from backends.base import Chunk, Usage
from gateway.chat.render import usage_chunk_body, usage_dict
from gateway.completions.protocol import COMPLETION_IDS, CompletionRequest, to_generation
from gateway.wire.format import Caller, RunView, SimpleFormat, Turn, plain_turn
from gateway.wire.sse import Event


def completion_body(
    request_id: str, model: str, created: int, text: str, final: Chunk
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "finish_reason": final.finish_reason or "stop",
                "logprobs": None,
            }
        ],
        "usage": usage_dict(final.usage or Usage(0, 0)),
    }


def chunk_body(
    request_id: str, model: str, created: int, text: str, finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}],
    }


def whole(run: RunView, text: str, final: Chunk) -> Event:
    return completion_body(run.request_id, run.model, run.created, text, final)


async def events(run: RunView, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Event]:
    rid, created, model = run.request_id, run.created, run.model
    async for chunk in chunks:
        if chunk.text:
            yield chunk_body(rid, model, created, chunk.text)
        if chunk.finish_reason is not None:
            yield chunk_body(rid, model, created, "", chunk.finish_reason)
            if run.include_usage and chunk.usage is not None:
                usage = usage_chunk_body(rid, model, created, chunk.usage)
                yield {**usage, "object": "text_completion"}


def translate(body: CompletionRequest, caller: Caller) -> Turn:
    return plain_turn(body, to_generation(body))


COMPLETIONS = SimpleFormat(CompletionRequest, translate, whole, events, COMPLETION_IDS)
