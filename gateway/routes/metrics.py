"""``GET /metrics``: Prometheus text exposition of the gateway's own registry."""

from __future__ import annotations

import asyncio

from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response

from gateway.state import get_state


async def metrics(request: Request) -> Response:
    state = get_state(request)
    # Gauges are read on the loop (engine state lives there); rendering runs off it.
    state.metrics.refresh(state.replicas, state.pools)
    body = await asyncio.to_thread(state.metrics.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
