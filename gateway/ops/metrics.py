"""``GET /metrics``: Prometheus text exposition of the gateway's own registry.

With ``metrics.token_from_env`` (or ``token_sha256``) set, the scraper must send
``Authorization: Bearer TOKEN`` (``gateway.edge.deps.scraper``); otherwise the route is open
(expose it to the scraper only).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.responses import Response

from gateway.edge.deps import ScraperDep
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import errors

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["operations"], responses=errors(401, 500))


@endpoints.get("/metrics")
async def metrics(core: ScraperDep) -> Response:
    # Gauges are read on the loop (engine state lives there); rendering runs off it.
    parts = core.parts
    parts.metrics.refresh(parts.replicas, parts.pools)
    body = await asyncio.to_thread(parts.metrics.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
