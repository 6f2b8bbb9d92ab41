"""The one place an exception becomes what the client sees: OpenAI's error shape, or the
shape of the endpoint family whose paths the request is on (Anthropic's on
``/v1/messages``: each ``gateway.edge.family.Family`` names its own).

- ``ApiError`` (ours): its status, type, code and param.
- Starlette/FastAPI ``HTTPException`` (unknown route, wrong method): the same shape.
- ``RequestValidationError`` (a typed query or path parameter): 400 naming the ``param``.
- ``StoreUnavailable`` (a shared store is down where nothing fails open): 503, once here
  rather than at every call site.
- Anything else: 500 ``internal_error`` with a generic message and the request id; the
  traceback goes to the log under that id. The boundary is a pure ASGI middleware, so
  no exception leaves the app and no connection is reset without an answer; if the
  response had already started, the body is ended cleanly instead.

Streams turn their own errors into an error event first (``gateway.wire.sse``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import ApiError, InvalidRequest, ServiceUnavailable, internal_error
from gateway.wire.errors import ErrorShape, openai_error
from policies.stores.store import StoreUnavailable

log = logging.getLogger(__name__)

REQUEST_ID = "x-request-id"


def error_request_id() -> str:
    return f"req-{os.urandom(12).hex()}"


class ErrorShapes:
    """Which shape an error takes on a path: the first family prefix it starts with."""

    def __init__(self, shapes: Sequence[tuple[str, ErrorShape]] = ()) -> None:
        self.shapes = tuple(shapes)

    def response(
        self, error: ApiError, extra_headers: dict[str, str] | None = None, path: str = ""
    ) -> Response:
        headers = {**(extra_headers or {})}
        if REQUEST_ID not in error.headers:
            headers[REQUEST_ID] = error_request_id()
        if error.detail:
            log.info("%s answered %s: %s", headers.get(REQUEST_ID), error.status, error.detail)
        shape = next((s for prefix, s in self.shapes if path.startswith(prefix)), openai_error)
        return shape(error, headers)

    async def api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return self.response(exc, path=request.url.path)

    async def store_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StoreUnavailable)
        log.warning("a store is unreachable on %s: %s", request.url.path, exc)
        error = ServiceUnavailable(
            "a shared store is unreachable; try again shortly", headers={"Retry-After": "2"}
        )
        return self.response(error, path=request.url.path)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        codes = {404: "not_found", 405: "method_not_allowed"}
        error = ApiError(str(exc.detail), code=codes.get(exc.status_code))
        error.status, error.type = exc.status_code, "invalid_request_error"
        return self.response(error, dict(exc.headers or {}), request.url.path)

    async def validation_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ())]
        param = loc[-1] if loc else None
        message = f"{param or 'request'}: {first.get('msg', 'invalid value')}"
        error = InvalidRequest(message, param=param, code="invalid_value")
        return self.response(error, path=request.url.path)


class ErrorBoundary:
    """Outermost own middleware: an unexpected exception is answered, never escapes."""

    def __init__(self, app: ASGIApp, shapes: ErrorShapes) -> None:
        self.app, self.shapes = app, shapes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        last: Message | None = None  # the response's latest message: nothing else per send

        async def tracked(message: Message) -> None:
            nonlocal last
            last = message
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            request_id = error_request_id()
            log.exception("%s: unhandled error on %s", request_id, scope.get("path"))
            try:
                if last is None:  # nothing sent: the response has not started
                    path = str(scope.get("path", ""))
                    answer = self.shapes.response(internal_error(request_id), path=path)
                    await answer(scope, receive, send)
                elif not _ended(last):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                log.info("%s: the client left before the error could be sent", request_id)


def _ended(message: Message) -> bool:
    return message["type"] == "http.response.body" and not message.get("more_body")


def install_error_handling(app: FastAPI, shapes: Sequence[tuple[str, ErrorShape]] = ()) -> None:
    """``shapes``: (path prefix, shape) of the families that do not answer in OpenAI's."""
    answers = ErrorShapes(shapes)
    app.add_exception_handler(ApiError, answers.api_error)
    app.add_exception_handler(StoreUnavailable, answers.store_error)
    app.add_exception_handler(HTTPException, answers.http_error)
    app.add_exception_handler(RequestValidationError, answers.validation_error)
    app.add_middleware(ErrorBoundary, shapes=answers)
