"""Errors the client sees, in OpenAI's shape, and the one place engine errors map to them.

ApiError (status, type, code, param)
├── InvalidRequest      400 invalid_request_error
├── InvalidApiKey       401 invalid_api_key
├── PermissionDenied    403 permission_denied
├── ModelNotFound       404 model_not_found
├── NotFound            404 (a stored response that is not there)
├── RequestTimeout      408 request_timeout (the body did not arrive in time)
├── PayloadTooLarge     413 request_too_large
├── RateLimited         429 rate_limit_exceeded / insufficient_quota
├── Overloaded          503 overloaded (with Retry-After)
├── ServiceUnavailable  503 (budget store down, not ready)
├── UpstreamError       502
├── GatewayTimeout      504
└── InternalError       500 internal_error (anything unexpected; details only in the log)

What an engine or upstream said (internal host:port, a provider's 401 body) never
reaches the client: ``from_engine_error`` gives a fixed message and keeps the original
text in ``ApiError.detail``, which goes to the log and the request's trace.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
from starlette.responses import Response

from backends import errors as engine_errors

log = logging.getLogger(__name__)

# What an upstream's text may carry that a client must not see: URLs, host:port, IPs, keys.
_SECRETS = re.compile(
    r"[a-z][a-z0-9+.-]*://\S+"
    r"|\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"
    r"|\b(?:localhost|[\w-]+(?:\.[\w-]+)+):\d{2,5}\b"
    r"|\b(?:sk|pk|rk|key|tg)[-_][\w-]{6,}",
    re.IGNORECASE,
)
MAX_UPSTREAM_TEXT = 300


class ApiError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail  # for the log and the trace, never for the client
        self.param = param
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self, extra_headers: dict[str, str] | None = None) -> Response:
        headers = {**self.headers, **(extra_headers or {})}
        return Response(
            orjson.dumps(self.body()),
            status_code=self.status,
            media_type="application/json",
            headers=headers,
        )


class InvalidRequest(ApiError):
    status = 400
    type = "invalid_request_error"


class InvalidApiKey(ApiError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDenied(ApiError):
    status = 403
    type = "invalid_request_error"
    code = "permission_denied"


class ModelNotFound(ApiError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFound(ApiError):
    status = 404
    type = "invalid_request_error"


class RequestTimeout(ApiError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class PayloadTooLarge(ApiError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RateLimited(ApiError):
    status = 429
    type = "requests"
    code = "rate_limit_exceeded"


class InsufficientQuota(ApiError):
    status = 429
    type = "insufficient_quota"
    code = "insufficient_quota"


class Overloaded(ApiError):
    status = 503
    type = "server_error"
    code = "overloaded"


class ServiceUnavailable(ApiError):
    status = 503
    type = "server_error"
    code = "service_unavailable"


class UpstreamError(ApiError):
    status = 502
    type = "server_error"
    code = "upstream_error"


class GatewayTimeout(ApiError):
    status = 504
    type = "server_error"
    code = "upstream_timeout"


class InternalError(ApiError):
    status = 500
    type = "server_error"
    code = "internal_error"


def internal_error(request_id: str) -> InternalError:
    return InternalError(
        f"The server had an error while processing your request; the request id is {request_id}.",
        headers={"x-request-id": request_id},
    )


def from_engine_error(exc: engine_errors.EngineError) -> ApiError:
    """Map an engine failure to what the client sees; the only place this mapping lives.

    The message is fixed per kind of failure; the engine's own text is the ``detail``.
    """
    error = _public_error(exc)
    error.detail = f"{type(exc).__name__}: {exc}"
    log.warning("engine error answered as %s %s: %s", error.status, error.code, error.detail)
    return error


def scrub(text: str) -> str:
    """An upstream's message with URLs, addresses and key-like tokens removed, bounded."""
    cleaned = _SECRETS.sub("[redacted]", text).strip()
    if len(cleaned) > MAX_UPSTREAM_TEXT:
        cleaned = cleaned[:MAX_UPSTREAM_TEXT] + "..."
    return cleaned or "no reason given"


def _public_error(exc: engine_errors.EngineError) -> ApiError:
    if isinstance(exc, engine_errors.EngineOverloaded):
        retry_after = str(exc.retry_after_s)
        return Overloaded("the tier is overloaded", headers={"Retry-After": retry_after})
    if isinstance(exc, engine_errors.EngineUnavailable):
        return Overloaded("no engine is available for this tier", headers={"Retry-After": "2"})
    if isinstance(exc, engine_errors.UpstreamTimeout):
        return GatewayTimeout("the upstream model did not answer in time")
    if isinstance(exc, engine_errors.ContextExceeded):  # OpenAI's words and code
        counted = f"at least {exc.tokens}" if exc.at_least else str(exc.tokens)
        return InvalidRequest(
            f"This model's maximum context length is {exc.context} tokens. However, your "
            f"{exc.param} resulted in {counted} tokens.",
            param=exc.param,
            code="context_length_exceeded",
        )
    if isinstance(exc, engine_errors.UpstreamRejected):
        if exc.status in (401, 403):  # the gateway's own credentials: not the client's fault
            return UpstreamError("the upstream provider refused the gateway's credentials")
        if exc.status == 429:
            return Overloaded(
                "the upstream provider is rate limiting", headers={"Retry-After": "1"}
            )
        if exc.status < 500:  # about the client's request: said, without hosts or keys
            return InvalidRequest(f"the model rejected the request: {scrub(str(exc))}")
        return UpstreamError(f"the upstream model failed (status {exc.status})")
    return UpstreamError("the model failed while generating")
