"""``/healthz`` (the process answers) and ``/readyz`` (engines loaded, a tier serves, store up).

``/readyz`` also names the running config version (a content hash, equal on fronts that
run the same file), the last version published through Redis, and each discovered
engine's nodes with their health.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.cluster.reload_bus import config_version
from gateway.edge.deps import CoreDep
from gateway.edge.http import GatewayEndpoint

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["operations"])


@endpoints.get("/healthz")
async def healthz() -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


@endpoints.get("/readyz", responses={503: {"description": "not ready (the body says why)"}})
async def readyz(request: Request, core: CoreDep) -> Response:
    parts = core.parts
    tiers = {name: pool.healthy() for name, pool in parts.pools.items()}
    store_ok = await parts.store.ping()
    ready = parts.readiness.ready and store_ok and all(tiers.values())
    body: dict[str, Any] = {
        "ready": ready,
        "store": parts.store.kind,
        "store_ok": store_ok,
        "tiers": tiers,
        "config_version": config_version(core.config),
    }
    cluster = getattr(request.app.state, "tiergate_cluster", None)
    if cluster is not None:
        if cluster.bus is not None:
            body["published_version"] = cluster.bus.published
        nodes = cluster.discovery.nodes()
        if nodes:
            body["nodes"] = nodes
    return Response(
        orjson.dumps(body), status_code=200 if ready else 503, media_type="application/json"
    )
