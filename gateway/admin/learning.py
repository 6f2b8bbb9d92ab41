"""``/admin/api/feedback``: what the feedback loop has gathered and decided.

``GET`` (dashboard session or admin key): labels gathered (kept, and ever by source,
tier and verdict), the refit history (accepted / rolled back / reverted, with the
hold-out numbers before and after), the serving version, the operator budget, and this
replica's counters. ``POST /admin/api/feedback/refit`` (admin key): refit now.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.admin.audit import record as audit
from gateway.admin.deps import AdminDep, AdminKeyDep
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import ADMIN_ERRORS
from gateway.errors import InvalidRequest
from gateway.learning.operator_calls import operator_scopes
from gateway.learning.refitter import refit_once
from gateway.learning.service import Feedback
from gateway.state import GatewayState
from policies.stores.feedback import parse_count_key

endpoints = APIRouter(
    route_class=GatewayEndpoint,
    prefix="/admin/api/feedback",
    tags=["admin"],
    responses=ADMIN_ERRORS,
)
REFITS_SHOWN = 20


def _json(body: dict[str, Any]) -> Response:
    return Response(
        orjson.dumps(body), media_type="application/json", headers={"cache-control": "no-store"}
    )


def _feedback(state: GatewayState) -> Feedback:
    if state.parts.feedback is None or state.config.routing.feedback is None:
        raise InvalidRequest("feedback is not enabled (routing.feedback)", code="feedback_disabled")
    return state.parts.feedback


@endpoints.get("")
async def feedback_overview(state: AdminDep) -> Response:
    if state.parts.feedback is None or state.config.routing.feedback is None:
        return _json({"enabled": False})
    feedback, spec = state.parts.feedback, state.config.routing.feedback
    counts = await feedback.store.label_counts()
    kept = await feedback.store.kept_labels()
    refits = await feedback.store.refits(REFITS_SHOWN)
    budget = await state.parts.money.budgets.status(operator_scopes(state.config)[1:])
    judge = spec.judge
    return _json(
        {
            "enabled": True,
            "sample": spec.sample,
            "tiers": list(state.config.tiers),
            "judge": {"tier": judge.tier, "model": judge.model, "labels": judge.labels},
            "labels": {
                "kept": kept,
                "max": spec.max_labels,
                "ever": [{**parse_count_key(k), "count": n} for k, n in sorted(counts.items())],
            },
            "refits": [asdict(e) for e in refits],
            "serving_version": feedback.refitter.version,
            "operator_budget": [{**asdict(s), "remaining_usd": s.remaining_usd} for s in budget],
            "replica": feedback.counts(),
        }
    )


@endpoints.post("/refit")
async def refit_now(request: Request, state: AdminKeyDep) -> Response:
    """Refit from the stored labels now (the same check as the online refit)."""
    feedback = _feedback(state)
    spec = state.config.routing.feedback
    assert spec is not None
    if feedback.refitter.base is None:
        raise InvalidRequest("no classifier is loaded: nothing to refit", code="feedback_no_model")
    await feedback.refitter.poll()
    run = await refit_once(
        feedback.store,
        feedback.refitter.base,
        feedback.refitter.serving,
        spec.refit,
        f"admin:{feedback.refitter.replica}",
    )
    await feedback.refitter.poll()
    if run is None or run.entry is None:
        raise InvalidRequest("too few labels to split into training and hold-out yet")
    after = {"decision": run.entry.decision, "version": run.entry.version}
    await audit(request, state, "feedback.refit", "routing", None, after)
    return _json({"refit": asdict(run.entry)})
