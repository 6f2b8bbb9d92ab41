"""``/healthz`` (the process answers) and ``/readyz`` (engines loaded, a tier serves, store up)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.responses import Response

from gateway.deps import StateDep
from gateway.http import GatewayRoute

router = APIRouter(route_class=GatewayRoute, tags=["operations"])


@router.get("/healthz")
async def healthz() -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


@router.get("/readyz", responses={503: {"description": "not ready (the body says why)"}})
async def readyz(state: StateDep) -> Response:
    tiers = {name: pool.healthy() for name, pool in state.pools.items()}
    store_ok = await state.store.ping()
    ready = state.ready and store_ok and all(tiers.values())
    body = {"ready": ready, "store": state.store.kind, "store_ok": store_ok, "tiers": tiers}
    return Response(
        orjson.dumps(body), status_code=200 if ready else 503, media_type="application/json"
    )
