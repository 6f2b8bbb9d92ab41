"""The dashboard page, its login and logout, and its static files (chart library included).

The admin key travels only in a POST body; the browser then holds an opaque session
cookie (HttpOnly, SameSite=Strict, path /admin, Secure over HTTPS). Chart.js is
served from where npm installed it (``deploy/install-dashboard-assets.sh``), or from
``TIERGATE_CHARTJS_PATH``.
"""

from __future__ import annotations

import hashlib
import html
import logging
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response

from gateway.admin.access import has_session, sessions
from gateway.admin.auth import admin_digest, check_admin_guess, client_address, require_admin
from gateway.admin.session import COOKIE, COOKIE_PATH
from gateway.edge.http import read_body
from gateway.errors import ApiError, InvalidRequest
from gateway.settings import get_settings
from gateway.state import get_state
from policies.stores.audit import entry
from policies.stores.store import StoreUnavailable

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
CHART_JS = HERE / "node_modules" / "chart.js" / "dist" / "chart.umd.min.js"
OWN_FILES = {
    "dashboard.js": "text/javascript",
    "keys.js": "text/javascript",
    "money.js": "text/javascript",
    "dashboard.css": "text/css",
}
LOGIN_BODY_LIMIT = 4096

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


@lru_cache
def _template(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def chart_js_path() -> Path:
    configured = get_settings().chartjs_path
    return configured if configured is not None else CHART_JS


def _page(name: str, status: int = 200, error: str = "") -> Response:
    body = _template(name).replace("{{error}}", html.escape(error))
    return Response(body, status, media_type="text/html", headers=SECURITY_HEADERS)


async def _admin_page(request: Request, name: str) -> Response:
    """``name`` with a session (or the Bearer admin key), else the login form."""
    state = get_state(request)
    if "authorization" in request.headers:
        require_admin(request, state)
        return _page(name)
    if await has_session(request, state):
        return _page(name)
    return _page("login.html")


async def dashboard(request: Request) -> Response:
    return await _admin_page(request, "dashboard.html")


async def keys_page(request: Request) -> Response:
    """Issue, list, edit and revoke API keys; the audit log."""
    return await _admin_page(request, "keys.html")


async def login(request: Request) -> Response:
    state = get_state(request)
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise InvalidRequest("log in with the form at /admin")
    raw = await read_body(request, LOGIN_BODY_LIMIT)
    key = parse_qs(raw.decode("utf-8", "replace")).get("key", [""])[0].strip()
    digest = admin_digest(state)
    if digest is None or not check_admin_guess(request, state, key):
        log.warning("admin login refused from %s", client_address(request))
        return _page("login.html", 401, "That is not the admin key.")
    token = await sessions(state).create(digest)
    actor = f"session:{hashlib.sha256(token.encode()).hexdigest()[:12]}"
    await state.audit.append(entry(actor, "session.login", "admin", None, None))
    response = RedirectResponse("/admin", status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        max_age=int(state.config.admin.session_ttl_s),
        path=COOKIE_PATH,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return response


async def logout(request: Request) -> Response:
    state = get_state(request)
    try:
        await sessions(state).revoke(request.cookies.get(COOKIE, ""))
    except StoreUnavailable:
        log.warning("logout: the session store is unavailable; the cookie is cleared anyway")
    response = RedirectResponse("/admin", status_code=303)
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
    return response


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name == "chart.umd.min.js":
        path = chart_js_path()
        if not path.is_file():
            error = ApiError(
                "the chart library is not installed: run deploy/install-dashboard-assets.sh"
            )
            error.status, error.code = 404, "not_found"
            return error.response()
        return FileResponse(
            path, media_type="text/javascript", headers={"cache-control": "max-age=3600"}
        )
    if name not in OWN_FILES:
        error = ApiError(f"no static file {name!r}")
        error.status, error.code = 404, "not_found"
        return error.response()
    return Response(
        _template(name), media_type=OWN_FILES[name], headers={"cache-control": "no-cache"}
    )
