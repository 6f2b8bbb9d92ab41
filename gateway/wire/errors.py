"""The error bodies failures answer with: how a family writes them (``ErrorShape``), and
their models for ``/openapi.json``.

``gateway.errors.ApiError.body`` writes OpenAI's shape (``openai_error``), the Messages
family Anthropic's (``gateway.messages.render.anthropic_error``); each family names its
shape (``gateway.edge.family``) and the error boundary answers in it. A test checks each
writer and its model agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from gateway.errors import ApiError

# The response an error becomes on a family's routes, with extra headers (the request id).
ErrorShape = Callable[[ApiError, dict[str, str]], Response]


def openai_error(error: ApiError, headers: dict[str, str]) -> Response:
    """OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return error.response(headers)


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail


class AnthropicErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str  # invalid_request_error, authentication_error, rate_limit_error…
    message: str


class AnthropicError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["error"]
    error: AnthropicErrorDetail
    request_id: str | None = None
