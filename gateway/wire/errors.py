"""The error bodies failures answer with, as models for ``/openapi.json``.

``gateway.errors.ApiError.body`` writes OpenAI's shape, ``gateway.wire.messages_output``
Anthropic's (on ``/v1/messages``); a test checks each writer and its model agree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


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
