"""The admin route table: the dashboard pages (not in the schema) and its JSON API."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.admin import api, pages
from gateway.edge.http import GatewayRoute
from gateway.edge.openapi import ADMIN_ERRORS


def admin_router() -> APIRouter:
    router = APIRouter(route_class=GatewayRoute, tags=["admin"])
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
    return router
