"""``GET /admin/api/batches``: every tenant's batches (``?tenant=`` one), newest first,
with their progress and money: what their lines were charged at batch prices, and what
the same answers would have cost interactively (the cost plus the batch saving)."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from starlette.responses import Response

from gateway.admin.deps import AdminDep
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import ADMIN_ERRORS
from policies.stores.batch_records import ENDED, BatchRecord
from policies.stores.budget import to_usd

endpoints = APIRouter(route_class=GatewayEndpoint, tags=["admin"], responses=ADMIN_ERRORS)


def batch_row(record: BatchRecord) -> dict[str, Any]:
    cost, saved = to_usd(record.cost_nano), to_usd(record.saved_nano)
    return {
        "id": record.id,
        "api": record.api,
        "endpoint": record.endpoint,
        "key_id": record.key_id,
        "status": record.status,
        "created_at": record.created_at,
        "ended_at": record.ended_at or None,
        "total": record.total,
        "done": record.done,
        "completed": record.completed,
        "failed": record.failed,
        "cancelled": record.cancelled,
        "expired": record.expired,
        "cost_usd": cost,
        "saved_usd": saved,
        "interactive_usd": cost + saved,
    }


def tenant_row(tenant: str, records: list[BatchRecord]) -> dict[str, Any]:
    rows = [batch_row(r) for r in reversed(records)]
    return {
        "tenant": tenant,
        "open": sum(1 for r in records if r.status not in ENDED),
        "lines": sum(r.total for r in records),
        "done": sum(r.done for r in records),
        "cost_usd": sum(row["cost_usd"] for row in rows),
        "saved_usd": sum(row["saved_usd"] for row in rows),
        "batches": rows,
    }


@endpoints.get("/admin/api/batches")
async def batches(state: AdminDep, tenant: Annotated[str | None, Query()] = None) -> Response:
    names = [tenant] if tenant is not None else state.keys.tenant_names()
    store = state.parts.batches
    tenants = [tenant_row(name, await store.batches(name)) for name in names]
    body = {"object": "list", "tenants": [t for t in tenants if t["batches"] or tenant]}
    return Response(
        orjson.dumps(body), media_type="application/json", headers={"cache-control": "no-store"}
    )
