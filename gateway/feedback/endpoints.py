"""``POST /v1/feedback``: ``{"request_id", "verdict": "good" | "bad"}`` with the key of the
tenant that made the request.

The request's record (``gateway/learning/records.py``) says who made it: another
tenant's request id, or one whose record expired, is a 404 that tells nothing about it.
A verdict is given once; the same one again is a no-op, another one a 409. A live
answer's verdict becomes a label of the tier that answered; a cached answer's verdict
is the cache's: a bad one evicts the entry the hit came from, for every replica, and the
pair (the cached prompt, this request's text) becomes a ``match: false`` label of the
cache (``forget_cached_answer``). ``cache_evicted`` says whether this call evicted it.
A bad verdict on a turn of an agent session (``routing.sessions``) moves the session one
tier up on its next turn; ``session_escalates`` says so.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.cache.service import PromptCache
from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import GatewayEndpoint, read_body
from gateway.edge.openapi import errors, request_body
from gateway.errors import ApiError, InvalidRequest, ServiceUnavailable
from gateway.feedback.protocol import FeedbackRequest
from gateway.learning.records import HITS
from gateway.wire.common import parse_body
from policies.stores.cache.storage import CacheUnavailable
from policies.stores.feedback import RequestRecord
from routers.live_sessions import Sessions

endpoints = APIRouter(
    route_class=GatewayEndpoint, tags=["v1"], responses=errors(400, 401, 404, 409, 413, 500, 503)
)


class RequestNotFound(ApiError):
    status = 404
    type = "invalid_request_error"
    code = "request_not_found"


class VerdictConflict(ApiError):
    status = 409
    type = "invalid_request_error"
    code = "verdict_conflict"


async def forget_cached_answer(cache: PromptCache | None, record: RequestRecord) -> bool:
    """A client called a cached answer bad: evict the entry it came from (every replica)
    and keep the pair as a label of the cache. False: no cache, no entry on the record, or
    the entry was already gone (another verdict, its TTL, an overwrite)."""
    if cache is None or record.entry_id is None:
        return False
    try:
        return await cache.forget(
            record.tenant, record.entry_id, query_text=record.query_text or ""
        )
    except CacheUnavailable as exc:
        raise ServiceUnavailable("the cache store is unreachable; try again shortly") from exc


async def escalate_session(sessions: Sessions | None, request_id: str) -> bool:
    """A bad answer in an agent session: its next turn moves one tier up
    (``routing.sessions``). False: sessions off, or the request's session is gone."""
    if sessions is None:
        return False
    return await sessions.bad_verdict(request_id)  # a store outage: the boundary's 503


@endpoints.post("/v1/feedback", openapi_extra=request_body(FeedbackRequest))
async def post_feedback(request: Request, call: TenantDep) -> Response:
    core, principal = call.core, call.principal  # one snapshot for the whole call
    config = core.config
    raw = await read_body(request, config.server.max_body_bytes, config.server.header_timeout_s)
    body = parse_body(FeedbackRequest, raw)
    spec, feedback = config.routing.feedback, core.parts.feedback
    if spec is None or feedback is None:
        raise InvalidRequest(
            "feedback is not enabled on this gateway (routing.feedback)", code="feedback_disabled"
        )
    record = await feedback.record(body.request_id)
    if record is None or record.tenant != principal.tenant:
        raise RequestNotFound(
            f"no request {body.request_id!r} to give feedback on (unknown or expired)",
            param="request_id",
        )
    previous, label = await feedback.client_verdict(spec, principal, record, body.verdict)
    if previous is not None and previous != body.verdict:
        raise VerdictConflict(
            f"request {body.request_id!r} already has the verdict {previous!r}", param="verdict"
        )
    evicted, escalates = False, False
    if body.verdict == "bad" and record.cache in HITS:
        # Again on a repeat: a store outage that refused the first eviction is retried.
        evicted = await forget_cached_answer(core.parts.cache, record)
    if body.verdict == "bad":
        escalates = await escalate_session(core.parts.router.sessions, body.request_id)
    answer = {
        "object": "tiergate.feedback",
        "request_id": body.request_id,
        "verdict": body.verdict,
        "labelled_tier": None if label is None else label.tier,
        "cache": record.cache,
        "cache_evicted": evicted,
        "session_escalates": escalates,
    }
    return Response(orjson.dumps(answer), media_type="application/json")


FAMILY = Family((endpoints,), bodies=(FeedbackRequest,))
