"""The admin route table."""

from __future__ import annotations

from starlette.applications import Starlette

from gateway.admin import api, pages


def add_routes(app: Starlette) -> None:
    app.add_route("/admin", pages.dashboard, methods=["GET"])
    app.add_route("/admin/keys", pages.keys_page, methods=["GET"])
    app.add_route("/admin/login", pages.login, methods=["POST"])
    app.add_route("/admin/logout", pages.logout, methods=["POST"])
    app.add_route("/admin/static/{name}", pages.static, methods=["GET"])
    app.add_route("/admin/api/overview", api.overview, methods=["GET"])
    app.add_route("/admin/api/denials", api.denials, methods=["GET"])
