"""``POST /v1/completions`` (legacy text completions), the request side: the wire model
and its translation to a ``GenerationRequest`` (the answer side:
``gateway.completions.render``)."""

from __future__ import annotations

from pydantic import Field

from backends.base import GenerationRequest, SamplingParams
from gateway.errors import InvalidRequest
from gateway.types import IdShape
from gateway.wire.common import SamplingFields

COMPLETION_IDS = IdShape("cmpl-")


class CompletionRequest(SamplingFields):
    prompt: str | list[str] = Field(min_length=1)

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("only one prompt per request is supported")
        return self.prompt[0]


DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this endpoint


def to_generation(body: CompletionRequest) -> GenerationRequest:
    try:
        prompt = body.prompt_text()
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="prompt") from None
    return GenerationRequest(
        request_id=COMPLETION_IDS.new(),
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
