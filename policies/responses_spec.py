"""The ``responses:`` section: how long stored Responses live and how large one may be.

A response created with ``store`` (OpenAI's default) is kept in the shared store (Redis,
or this process without ``redis_url``) under its owner, the tenant and API key that
created it, for ``ttl_s``; ``GET``/``DELETE /v1/responses/{id}`` and
``previous_response_id`` find it there. A record (the conversation it was given, its
output, its echo) larger than ``max_bytes`` is not kept: the request is refused up front
when its input alone is larger, and a response whose output pushes it over says
``"store": false``. A tenant keeps at most ``tenant_max_count`` stored Responses of
``tenant_max_bytes`` in all (every key of it together): a request with ``store`` over
either is refused up front (400 ``stored_responses_limit``), and one whose Response would
push it over says ``"store": false``. ``GET /admin/api/tenants`` shows each tenant's use.
"""

from __future__ import annotations

from pydantic import Field

from policies.frozen import Frozen


class ResponsesConfig(Frozen):
    ttl_s: float = Field(86_400.0, gt=0, le=30 * 86_400)
    max_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    tenant_max_count: int = Field(10_000, ge=1)
    tenant_max_bytes: int = Field(256 * 1024 * 1024, ge=1024)
