"""``POST /admin/api/policies/reload`` (admin key): reload the policy file here, then on
every front (``gateway.cluster.reload`` reads, checks and swaps; ``gateway.cluster.reload_bus``
publishes the new version through Redis). Refused files and reloads are audited."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import APIRouter
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.audit import record
from gateway.admin.deps import AdminKeyDep
from gateway.cluster.reload import PolicyRejected, reload_policies
from gateway.cluster.reload_bus import ReloadBus, config_version
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import ADMIN_ERRORS
from gateway.errors import InvalidRequest

log = logging.getLogger(__name__)

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["admin"], responses=ADMIN_ERRORS)


@endpoints.post("/admin/api/policies/reload")
async def reload_and_publish(request: Request, state: AdminKeyDep) -> Response:
    """Reload here, then on every front."""
    try:
        done = await reload_policies(state)
    except PolicyRejected as exc:
        await record(request, state, "policies.reload_refused", "policies", None,
                     {"problems": exc.problems})  # fmt: skip
        raise InvalidRequest(
            "policy file refused, the running policy stays: " + "; ".join(exc.problems),
            code="invalid_policy",
        ) from exc
    body: dict[str, Any] = {
        "status": "reloaded",
        "tenants": done.tenants,
        "thresholds": list(done.thresholds),
    }
    await record(request, state, "policies.reload", "policies", None, body)
    body["version"] = version = config_version(state.config)
    cluster = getattr(request.app.state, "tiergate_cluster", None)
    bus: ReloadBus | None = cluster.bus if cluster is not None else None
    if bus is not None:
        try:
            body["fronts_listening"] = await bus.publish(version)
        except RedisError as exc:
            log.error("reload bus: publish failed: %s", exc)
            body["fronts_listening"] = None
            body["publish_error"] = "Redis did not take the message; other fronts keep theirs"
    return Response(orjson.dumps(body), media_type="application/json")
