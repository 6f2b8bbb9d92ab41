"""``/admin/api/cache``: per tenant entries, memory, lookups, hits, refusals by reason and
the verifier's latency (summed over every replica); a tenant's feedback labels; flush."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.admin.audit import record
from gateway.admin.deps import AdminDep, AdminKeyDep
from gateway.cache.service import PromptCache
from gateway.cache.stats import summary
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import ADMIN_ERRORS
from gateway.errors import ApiError, ServiceUnavailable
from gateway.state import GatewayState
from policies.stores.cache.storage import CacheUnavailable, TenantUsage

endpoints = APIRouter(
    route_class=GatewayEndpoint, prefix="/admin/api/cache", tags=["admin"], responses=ADMIN_ERRORS
)


class UnknownTenant(ApiError):
    status = 404
    type = "invalid_request_error"
    code = "tenant_not_found"


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


def _cache(state: GatewayState) -> PromptCache:
    if state.parts.cache is None:
        raise ServiceUnavailable("the prompt cache is off for every tenant")
    return state.parts.cache


def _tenant(state: GatewayState, tenant: str) -> str:
    if tenant not in state.config.tenants:
        raise UnknownTenant(f"no tenant named {tenant!r}", param="tenant")
    return tenant


def _usage_body(usage: TenantUsage) -> dict[str, Any]:
    return {
        "entries": usage.entries,
        "memory_bytes": usage.memory_bytes,
        "index_bytes": usage.index_bytes,
    }


@endpoints.get("")
async def cache_usage(state: AdminDep) -> Response:
    cache = _cache(state)
    tenants: dict[str, Any] = {}
    try:
        for name in state.config.tenants:
            tenants[name] = _usage_body(await cache.usage(name))
            tenants[name]["semantic_hits"] = cache.counters.semantic_by_tenant.get(name, 0)
            tenants[name]["shared"] = summary(await cache.tenant_stats(name))
    except CacheUnavailable as exc:
        raise ServiceUnavailable(f"the cache store is unavailable: {exc}") from exc
    counters = cache.counters
    return _json(
        {
            "storage": cache.kind,
            "tenants": tenants,
            "counters": {
                "exact_hits": counters.exact_hits,
                "semantic_hits": counters.semantic_hits,
                "semantic_refused": counters.refused,
                "semantic_refused_by_reason": counters.refused_by_reason,
                "forgotten": counters.forgotten,
                "misses": counters.misses,
                "bypassed": counters.bypassed,
                "stored": counters.stored,
                "unavailable": counters.unavailable,
                "saved_usd": counters.saved_usd,
                "bypass_reasons": counters.by_reason,
            },
        }
    )


@endpoints.get("/{tenant}")
async def tenant_usage(tenant: str, state: AdminDep) -> Response:
    cache = _cache(state)
    tenant = _tenant(state, tenant)
    try:
        usage = await cache.usage(tenant)
        shared = summary(await cache.tenant_stats(tenant))
    except CacheUnavailable as exc:
        raise ServiceUnavailable(f"the cache store is unavailable: {exc}") from exc
    semantic_hits = cache.counters.semantic_by_tenant.get(tenant, 0)
    return _json(
        {"tenant": tenant, **_usage_body(usage), "semantic_hits": semantic_hits, "shared": shared}
    )


@endpoints.get("/{tenant}/labels")
async def tenant_labels(tenant: str, state: AdminDep) -> Response:
    """Pairs flagged wrong by feedback (``PromptCache.forget``), newest first."""
    cache = _cache(state)
    tenant = _tenant(state, tenant)
    try:
        labels = await cache.labels(tenant)
    except CacheUnavailable as exc:
        raise ServiceUnavailable(f"the cache store is unavailable: {exc}") from exc
    return _json({"tenant": tenant, "labels": labels})


@endpoints.delete("/{tenant}")
async def flush_tenant(request: Request, tenant: str, state: AdminKeyDep) -> Response:
    cache = _cache(state)
    tenant = _tenant(state, tenant)
    try:
        removed = await cache.flush(tenant)
    except CacheUnavailable as exc:
        raise ServiceUnavailable(f"the cache store is unavailable: {exc}") from exc
    await record(request, state, "cache.flush", tenant, None, {"removed": removed})
    return _json({"tenant": tenant, "removed": removed})
