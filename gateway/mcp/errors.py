"""The JSON-RPC errors ``/mcp`` answers with, mapped once from the gateway's own.

JSON-RPC leaves -32000 to -32099 to the server; the SDK uses -32000 (connection closed)
and -32001 (request timeout). The gateway adds, each with ``data`` saying what kind
(``type``, OpenAI's error type, and ``code``) and, where it helps, when to retry:

====== ===================== ===============================================
-32602 invalid params        unknown or not allowed tool, prompt, resource
-32001 request timeout       the upstream did not answer within the timeout
-32050 upstream unavailable  down, or it ended mid-call
-32051 result too large      the answer passed ``mcp.max_result_bytes``
-32052 rate limited          the caller's tool calls per minute
-32053 insufficient quota    a budget cannot pay the tool's price
-32054 unavailable           a store is down, or too many calls at once
====== ===================== ===============================================

An upstream's own JSON-RPC error reaches the client with its code; every message is
scrubbed of URLs, addresses and key-like strings first (``gateway.errors.scrub``).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from gateway.errors import ApiError, InsufficientQuota, RateLimited, scrub
from gateway.mcp.upstream import UpstreamFailure

UPSTREAM_UNAVAILABLE = -32050
RESULT_TOO_LARGE = -32051
RATE_LIMITED = -32052
INSUFFICIENT_QUOTA = -32053
UNAVAILABLE = -32054

_BY_STATUS = {
    "down": UPSTREAM_UNAVAILABLE,
    "closed": UPSTREAM_UNAVAILABLE,
    "timeout": types.REQUEST_TIMEOUT,
    "too_large": RESULT_TOO_LARGE,
}


def unknown(kind: str, name: str) -> MCPError:
    """The same answer whether the name does not exist or the caller may not use it."""
    return MCPError(types.INVALID_PARAMS, f"Unknown {kind}: {name}")


def from_failure(failure: UpstreamFailure) -> MCPError:
    code = _BY_STATUS.get(failure.status, failure.code)
    data = {"type": "upstream_error", "code": failure.status}
    return MCPError(code, scrub(failure.message), data)


def from_refusal(exc: ApiError) -> MCPError:
    """A refused admission (rate limit, budget, a store down), as JSON-RPC."""
    data: dict[str, Any] = {"type": exc.type, "code": exc.code}
    retry = exc.headers.get("Retry-After")
    if retry is not None:
        data["retry_after_s"] = float(retry)
    if isinstance(exc, InsufficientQuota):
        code = INSUFFICIENT_QUOTA
    elif isinstance(exc, RateLimited):
        code = RATE_LIMITED
    else:
        code = UNAVAILABLE
    return MCPError(code, exc.message, data)
