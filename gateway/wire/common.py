"""Pieces shared by the chat and completions wire models."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backends.base import TokenLogprob
from gateway.errors import InvalidRequest

M = TypeVar("M", bound=BaseModel)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields both endpoints share; unknown fields are accepted and logged at debug."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    user: str | None = None
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


def logprobs_body(entries: tuple[TokenLogprob, ...] | None) -> dict[str, Any] | None:
    """OpenAI's chat ``logprobs``: one entry per token, with its top alternatives."""
    if not entries:
        return None
    return {
        "content": [
            {
                "token": e.token,
                "logprob": e.logprob,
                "bytes": list(e.token_bytes),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": list(b)} for t, lp, b in e.top
                ],
            }
            for e in entries
        ],
        "refusal": None,
    }


def parse_body(model: type[M], raw: bytes) -> M:
    """Decode and validate a request body; a failure names the offending ``param``."""
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"]]
        param = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".")
        raise InvalidRequest(
            f"{param or 'body'}: {first['msg']}", param=param or None, code="invalid_value"
        ) from exc
