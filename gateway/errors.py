"""Errors the client sees, in OpenAI's shape, and the one place engine errors map to them.

ApiError (status, type, code, param)
├── InvalidRequest      400 invalid_request_error
├── InvalidApiKey       401 invalid_api_key
├── PermissionDenied    403 permission_denied
├── ModelNotFound       404 model_not_found
├── PayloadTooLarge     413 request_too_large
├── RateLimited         429 rate_limit_exceeded / insufficient_quota
├── Overloaded          503 overloaded (with Retry-After)
├── ServiceUnavailable  503 (budget store down, not ready)
├── UpstreamError       502
└── GatewayTimeout      504
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from backends import errors as engine_errors


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
    ) -> None:
        super().__init__(message)
        self.message = message
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


def from_engine_error(exc: engine_errors.EngineError) -> ApiError:
    """Map an engine failure to what the client sees; the only place this mapping lives."""
    if isinstance(exc, engine_errors.EngineOverloaded):
        retry_after = str(exc.retry_after_s)
        return Overloaded(
            str(exc) or "the tier is overloaded", headers={"Retry-After": retry_after}
        )
    if isinstance(exc, engine_errors.EngineUnavailable):
        return Overloaded(str(exc) or "no engine available", headers={"Retry-After": "2"})
    if isinstance(exc, engine_errors.UpstreamTimeout):
        return GatewayTimeout(str(exc) or "the upstream did not answer in time")
    if isinstance(exc, engine_errors.UpstreamRejected):
        return InvalidRequest(str(exc)) if exc.status < 500 else UpstreamError(str(exc))
    return UpstreamError(str(exc) or "the engine failed")
