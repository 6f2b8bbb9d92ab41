"""Request plumbing every endpoint shares: bounded body reads and tenant-key auth (the
``tenant_call`` dependency: the principal and the serving core the request runs on)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.serving_core import ServingCore
from gateway.edge.openapi import security_scheme
from gateway.errors import (
    ApiError,
    InvalidApiKey,
    InvalidRequest,
    PayloadTooLarge,
    RequestTimeout,
)
from gateway.state import GatewayState
from gateway.telemetry.timing import begin_request
from gateway.telemetry.tracing import AUTH, RequestTrace, Tracing, active, stage
from gateway.wire.sse import EventStreamResponse, wait_disconnect
from policies.stores.key_directory import KeyDirectory
from policies.tenants import Principal

T = TypeVar("T")
Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class GatewayEndpoint(APIRoute):
    """FastAPI's route, resolving the one-dependency routes of ``gateway.edge.deps`` directly.

    FastAPI's general resolver costs tens of microseconds per request on this path
    (``bench/perf/route_overhead.py``). A route whose parameters are only ``request`` and
    dependencies that themselves take only ``request`` is called as FastAPI would call
    it, without the general machinery; any other route, or any dependency override,
    takes FastAPI's own path. The schema is FastAPI's either way.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if _direct(self.dependant):
            self.app = _without_exit_stacks(self, self.app)

    def get_route_handler(self) -> Handler:
        general = super().get_route_handler()
        if not _direct(self.dependant):
            return general
        call: Callable[..., Awaitable[Response]] = self.dependant.call  # type: ignore[assignment]
        request_name = self.dependant.request_param_name
        needs: list[tuple[str, Callable[[Request], Awaitable[Any]]]] = [
            (d.name, d.call)  # type: ignore[misc]
            for d in self.dependant.dependencies
        ]
        overrides = self.dependency_overrides_provider

        async def direct(request: Request) -> Response:
            if overrides is not None and getattr(overrides, "dependency_overrides", None):
                return await general(request)
            values: dict[str, Any] = {name: await dep(request) for name, dep in needs}
            if request_name is not None:
                values[request_name] = request
            return await call(**values)

        return direct


def _without_exit_stacks(route: GatewayEndpoint, general: ASGIApp) -> ASGIApp:
    """The route's ASGI app as Starlette builds it: FastAPI's also opens two exit stacks
    per request for dependencies with ``yield``, which a direct route has none of. With a
    dependency override, FastAPI's own (its resolver may need them)."""
    plain = request_response(route.get_route_handler())
    overrides = route.dependency_overrides_provider

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if overrides is not None and getattr(overrides, "dependency_overrides", None):
            await general(scope, receive, send)
        else:
            await plain(scope, receive, send)

    return app


def _direct(dependant: Dependant) -> bool:
    def plain(d: Dependant) -> bool:
        return not (
            d.path_params
            or d.query_params
            or d.header_params
            or d.cookie_params
            or d.body_params
            or d.websocket_param_name
            or d.http_connection_param_name
            or d.response_param_name
            or d.background_tasks_param_name
            or d.security_scopes_param_name
            or d.is_gen_callable
            or d.is_async_gen_callable
        )

    return (
        plain(dependant)
        and dependant.is_coroutine_callable
        and all(
            plain(d) and not d.dependencies and d.is_coroutine_callable and d.name
            for d in dependant.dependencies
        )
    )


class TracedEndpoint(GatewayEndpoint):
    """A generation route: its root span and stage timer start before the dependencies
    (auth included) run; the route's ``name`` is the span's operation."""

    def get_route_handler(self) -> Handler:
        handler = traced(self.name, super().get_route_handler())

        async def timed(request: Request) -> Response:
            state: GatewayState = request.app.state.tiergate
            begin_request(state.core.config.server.timing_header)
            return await handler(request)

        return timed


async def read_body(request: Request, limit: int, timeout_s: float | None = None) -> bytes:
    """The body, refused with 413 as soon as it (or its declared length) passes ``limit``,
    and with 408 when it has not all arrived within ``timeout_s`` (a slow sender)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_big = int(declared) > limit
        except ValueError:
            raise InvalidRequest("invalid Content-Length header") from None
        if too_big:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
    try:
        async with asyncio.timeout(timeout_s):
            return await _bounded_body(request, limit)
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {timeout_s}s") from None


async def _bounded_body(request: Request, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
        parts.append(part)
    return b"".join(parts)


def bearer_key(request: Request) -> str | None:
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return key if scheme.lower() == "bearer" else None


def tenant_key(request: Request) -> str | None:
    """A tenant key as OpenAI's clients send it (``Authorization: Bearer``), else as
    Anthropic's do (``x-api-key``); both look up the same key store. Two different keys in
    one request are refused: which one pays must never depend on which header wins."""
    bearer, api_key = bearer_key(request), request.headers.get("x-api-key")
    if bearer and api_key and bearer.strip() != api_key.strip():
        raise InvalidApiKey(
            "Two different API keys in one request ('Authorization: Bearer' and 'x-api-key'): "
            "send one."
        )
    return bearer or api_key


async def authenticate(keys: KeyDirectory, key: str | None) -> Principal:
    """The tenant behind a Bearer key (the one place tenant keys are checked: the
    directory of the config's keys and the API-managed ones)."""
    with stage(AUTH) as span:
        key = (key or "").strip()
        if not key:
            raise InvalidApiKey(
                "You didn't provide an API key (header 'Authorization: Bearer KEY' or "
                "'x-api-key: KEY')."
            )
        principal = await keys.authenticate(key)
        if principal is None:
            raise InvalidApiKey("Incorrect API key provided.")
        span.set_attribute("tiergate.tenant", principal.tenant)
    return principal


@dataclass(frozen=True, slots=True)
class TenantCall:
    core: ServingCore  # the request's snapshot, taken with its key lookup
    principal: Principal


@security_scheme("tenantKey")
async def tenant_call(request: Request) -> TenantCall:
    """The tenant behind the key (``state.keys`` decides), and the core to run on.

    The core is read right after the key resolved (a YAML key resolves without
    suspending, so a policy reload lands wholly before or wholly after the pair): the
    request runs by that one snapshot to its end."""
    state: GatewayState = request.app.state.tiergate
    principal = await authenticate(state.keys, tenant_key(request))
    return TenantCall(state.core, principal)


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work``, cancelling it if the client goes away first (non-streaming requests).

    ``work`` runs in this task; only the watcher is a task of its own (one task and no
    ``asyncio.wait`` per request: this is on every request's path).
    """
    task = asyncio.current_task()
    assert task is not None
    watcher = asyncio.ensure_future(wait_disconnect(request.receive))
    finished = False

    def client_gone(done: asyncio.Future[None]) -> None:
        if not finished and not done.cancelled() and done.exception() is None:
            task.cancel()

    watcher.add_done_callback(client_gone)
    try:
        return await work
    finally:
        finished = True
        watcher.cancel()


Endpoint = Callable[[Request], Awaitable[Response]]


def traced(operation: str, handler: Endpoint) -> Endpoint:
    """Wrap a route: a root span per request, ended when the response (or stream) ends."""

    async def endpoint(request: Request) -> Response:
        tracing: Tracing = request.app.state.tiergate.tracing
        if tracing.tracer is None:
            return await handler(request)
        trace = tracing.begin(operation, request)
        try:
            with active(trace):
                response = await handler(request)
        except ApiError as exc:
            if exc.detail:  # what the upstream said: for the operator, never the client
                trace.root.set_attribute("tiergate.error.detail", exc.detail)
            trace.end(exc.status, exc.code or exc.type)
            raise
        except BaseException as exc:
            trace.end(500, type(exc).__name__)
            raise
        if isinstance(response, EventStreamResponse):
            response.events = _ending(response.events, trace)
        else:
            trace.end(response.status_code)
        return response

    return endpoint


async def _ending(
    events: AsyncGenerator[bytes, None], trace: RequestTrace
) -> AsyncGenerator[bytes, None]:
    try:
        async for data in events:
            yield data
    finally:
        await events.aclose()
        trace.end(200)
