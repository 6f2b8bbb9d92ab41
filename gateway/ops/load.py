"""``GET /v1/load``: this process's engine load, what a front reads to balance across nodes.

An engine node answers with the sum over its replicas (each counted once, even when
several tiers share it): requests running in its engines, requests waiting (in the
engines' queues and in the pools' bounded queues), mean KV-cache usage, and whether any
replica is healthy. The front's ``openai`` engine for that node reports these as its own
load (``backends/openai_compat.py``). Needs an API key, like the rest of ``/v1``.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.responses import Response

from gateway.core.serving_core import Collaborators
from gateway.edge.deps import TenantDep
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import errors

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["v1"], responses=errors(401, 500, 503))


def node_load(parts: Collaborators) -> dict[str, object]:
    replicas = {id(r): r for group in parts.replicas.values() for r in group}.values()
    loads = [r.engine.load() for r in replicas]
    queued = sum(pool.waiting for pool in parts.pools.values())
    tiers = {
        name: {"healthy": pool.healthy(), "waiting": pool.waiting, "replicas": len(pool.replicas)}
        for name, pool in parts.pools.items()
    }
    return {
        "running": sum(load.running for load in loads),
        "waiting": sum(load.waiting for load in loads) + queued,
        "kv_usage": sum(load.kv_usage for load in loads) / len(loads) if loads else 0.0,
        "healthy": parts.readiness.ready and any(load.healthy for load in loads),
        "inflight": sum(r.inflight for r in replicas),
        "max_inflight": sum(r.max_inflight for r in replicas),
        "tiers": tiers,
    }


@endpoints.get("/v1/load")
async def load(call: TenantDep) -> Response:
    return Response(orjson.dumps(node_load(call.core.parts)), media_type="application/json")
