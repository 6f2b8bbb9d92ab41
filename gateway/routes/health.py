"""``/healthz`` (the process answers) and ``/readyz`` (engines loaded, a tier serves, store up)."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.state import get_state


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


async def readyz(request: Request) -> Response:
    state = get_state(request)
    tiers = {name: pool.healthy() for name, pool in state.pools.items()}
    store_ok = await state.store.ping()
    ready = state.ready and store_ok and all(tiers.values())
    body = {"ready": ready, "store": state.store.kind, "store_ok": store_ok, "tiers": tiers}
    return Response(
        orjson.dumps(body), status_code=200 if ready else 503, media_type="application/json"
    )
