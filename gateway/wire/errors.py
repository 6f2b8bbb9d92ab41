"""The error bodies failures answer with: how a family writes them (``ErrorShape``), and
their models for ``/openapi.json``.

``gateway.errors.ApiError.body`` writes OpenAI's shape (``openai_error``);
``anthropic_body`` and ``anthropic_error`` write Anthropic's (the Messages family's, and a
message batch's errored lines); each family names its shape (``gateway.edge.family``)
and the error boundary answers in it. A test checks each writer and its model agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from gateway.errors import ApiError

# The response an error becomes on a family's routes, with extra headers (the request id).
ErrorShape = Callable[[ApiError, dict[str, str]], Response]


def openai_error(error: ApiError, headers: dict[str, str]) -> Response:
    """OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return error.response(headers)


# Anthropic's error types and statuses, by the gateway's status.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
}
OVERLOADED_STATUS = 529  # what Anthropic answers when it is overloaded (its SDK retries it)


def anthropic_status(error: ApiError) -> int:
    return OVERLOADED_STATUS if error.code == "overloaded" else error.status


def anthropic_body(error: ApiError, request_id: str | None = None) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``, Anthropic's shape."""
    if error.code == "overloaded":
        kind = "overloaded_error"
    else:
        kind = _ERROR_TYPES.get(error.status, "api_error")
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": error.message}}
    request_id = request_id or error.headers.get("x-request-id")
    if request_id:
        body["request_id"] = request_id
    return body


def anthropic_error(error: ApiError, extra_headers: dict[str, str]) -> Response:
    """The Messages family's ``ErrorShape``: Anthropic's body and status (529 overloaded)."""
    headers = {**error.headers, **extra_headers}
    body = anthropic_body(error, headers.get("x-request-id"))
    return Response(
        orjson.dumps(body),
        status_code=anthropic_status(error),
        media_type="application/json",
        headers=headers,
    )


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
