"""``GET /v1/models``: every tier name, every configured model id, the embedding models."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.responses import Response

from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import errors

CREATED = 1_700_000_000
endpoints = APIRouter(route_class=GatewayEndpoint, tags=["v1"], responses=errors(401, 500))


@endpoints.get("/v1/models")
async def list_models(call: TenantDep) -> Response:
    config = call.core.config
    entries = [
        {
            "id": "auto",
            "object": "model",
            "created": CREATED,
            "owned_by": "tiergate",
            "tiergate": {"kind": "router", "tiers": list(config.tiers)},
        },
    ]
    for tier_name, tier in config.tiers.items():
        models = sorted({config.engines[e].model for e in tier.engines})
        entries.append(
            {
                "id": tier_name,
                "object": "model",
                "created": CREATED,
                "owned_by": "tiergate",
                "tiergate": {"kind": "tier", "models": models},
            }
        )
    for model in config.models():
        entries.append(
            {
                "id": model,
                "object": "model",
                "created": CREATED,
                "owned_by": "tiergate",
                "tiergate": {"kind": "model", "tier": config.tier_of_model(model)},
            }
        )
    for model, spec in sorted(config.embeddings.items()):
        source = "in-process" if spec.engine is None else spec.engine
        entries.append(
            {
                "id": model,
                "object": "model",
                "created": CREATED,
                "owned_by": "tiergate",
                "tiergate": {"kind": "embedding", "engine": source},
            }
        )
    return Response(
        orjson.dumps({"object": "list", "data": entries}), media_type="application/json"
    )


FAMILY = Family((endpoints,))
