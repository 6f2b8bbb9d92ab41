"""``GET /metrics``: Prometheus text exposition of the gateway's own registry.

With ``metrics.token_from_env`` (or ``token_sha256``) set, the scraper must send
``Authorization: Bearer TOKEN``; otherwise the route is open (expose it to the scraper only).
"""

from __future__ import annotations

import asyncio
import hmac
import os
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.responses import Response

from gateway.deps import StateDep
from gateway.errors import InvalidApiKey
from gateway.openapi import errors
from gateway.state import GatewayState
from policies.tenants import hash_key

router = APIRouter(tags=["operations"], responses=errors(401, 500))
_scraper = HTTPBearer(auto_error=False, scheme_name="metricsToken")


def metrics_digest(state: GatewayState) -> str | None:
    spec = state.config.metrics
    if spec.token_sha256 is not None:
        return spec.token_sha256
    raw = os.environ.get(spec.token_from_env, "") if spec.token_from_env else ""
    if spec.token_from_env and not raw:
        # Configured but unset: refuse everyone rather than fall open.
        return "unset"
    return hash_key(raw) if raw else None


@router.get("/metrics")
async def metrics(
    state: StateDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_scraper)],
) -> Response:
    expected = metrics_digest(state)
    if expected is not None:
        given = hash_key(credentials.credentials.strip()) if credentials else ""
        if not hmac.compare_digest(expected, given):
            raise InvalidApiKey("/metrics needs 'Authorization: Bearer METRICS_TOKEN'")
    # Gauges are read on the loop (engine state lives there); rendering runs off it.
    state.metrics.refresh(state.replicas, state.pools)
    body = await asyncio.to_thread(state.metrics.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
