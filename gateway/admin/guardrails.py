"""``/admin/api/guardrails``: what the guardrails found on this replica since it started,
by tenant, type, action and side (request, answer, file), and the screen's mean time.
Counts only, never a value (the same counts as ``tiergate_guardrail_detections``)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.responses import Response

from gateway.admin.deps import AdminDep
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import ADMIN_ERRORS

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["admin"], responses=ADMIN_ERRORS)


@endpoints.get("/admin/api/guardrails")
async def guardrails(state: AdminDep) -> Response:
    metrics = state.parts.metrics
    rows = [
        {"tenant": tenant, "type": kind, "action": action, "side": side, "count": count}
        for (tenant, kind, action, side), count in sorted(metrics.guard_totals.items())
    ]
    screens = metrics.guard_screens
    mean_us = metrics.guard_screen_s / screens * 1e6 if screens else None
    body = {
        "detections": rows,
        "screens": screens,
        "screen_mean_us": mean_us,
        "guarded_tenants": sorted(
            name for name, spec in state.config.tenants.items() if spec.guardrails is not None
        ),
    }
    return Response(orjson.dumps(body), media_type="application/json")
