"""The admin family: the dashboard pages (not in the schema), its JSON API, and the
admin API's keys, tenants, budgets, cache, learning, audit and policy reloads."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.admin import (
    audit,
    batches,
    budgets,
    cache,
    guardrails,
    keys,
    learning,
    pages,
    policies,
    tenants,
)
from gateway.admin import dashboard as api
from gateway.admin.protocol import BudgetUpdate, KeyCreate, KeyUpdate, TenantCreate, TenantUpdate
from gateway.edge.family import Family
from gateway.edge.http import GatewayEndpoint
from gateway.edge.openapi import ADMIN_ERRORS


def dashboard() -> APIRouter:
    router = APIRouter(route_class=GatewayEndpoint, tags=["admin"])
    router.add_api_route("/admin", pages.dashboard, methods=["GET"], include_in_schema=False)
    router.add_api_route("/admin/keys", pages.keys_page, methods=["GET"], include_in_schema=False)
    router.add_api_route("/admin/login", pages.login, methods=["POST"], include_in_schema=False)
    router.add_api_route("/admin/logout", pages.logout, methods=["POST"], include_in_schema=False)
    router.add_api_route(
        "/admin/static/{name}", pages.static, methods=["GET"], include_in_schema=False
    )
    router.add_api_route(
        "/admin/api/overview", api.overview, methods=["GET"], responses=ADMIN_ERRORS
    )
    router.add_api_route("/admin/api/denials", api.denials, methods=["GET"], responses=ADMIN_ERRORS)
    router.add_api_route(
        "/admin/api/tool_calls", api.tool_calls, methods=["GET"], responses=ADMIN_ERRORS
    )
    return router


FAMILY = Family(
    (
        budgets.endpoints,
        cache.endpoints,
        learning.endpoints,
        keys.endpoints,
        tenants.endpoints,
        audit.endpoints,
        batches.endpoints,
        dashboard(),
        policies.endpoints,
        guardrails.endpoints,
    ),
    bodies=(BudgetUpdate, KeyCreate, KeyUpdate, TenantCreate, TenantUpdate),
)
