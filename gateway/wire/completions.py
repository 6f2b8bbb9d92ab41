"""``POST /v1/completions`` (legacy text completions) wire models."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from backends.base import Chunk, Usage
from gateway.wire.chat import usage_dict
from gateway.wire.common import SamplingFields
from gateway.wire.fields import passthrough_fields


class CompletionRequest(SamplingFields):
    prompt: str | list[str] = Field(min_length=1)

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("only one prompt per request is supported")
        return self.prompt[0]

    def passthrough(self) -> dict[str, Any]:
        """``logprobs``, ``echo``, ``suffix``, ``best_of``… : for remote backends only."""
        return passthrough_fields(self.model_extra)


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
