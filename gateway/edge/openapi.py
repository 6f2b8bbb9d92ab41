"""``GET /openapi.json``: generated from the endpoint families, never written by hand.

Routes parse their bodies themselves (``gateway.wire.common.parse_body``: bounded
reads, orjson, OpenAI-shaped 400s naming the ``param``), so FastAPI does not see the
body models; each route names its model with ``request_body``, each family lists the
models its routes parse (``gateway.edge.family``), and the schema builder adds their
JSON schemas as components. Errors are declared per route with ``errors`` (the
``ErrorResponse`` wire model); each route's security scheme is the one its dependency
is marked with (``security_scheme``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from gateway.wire.errors import AnthropicError, ErrorResponse

REF = "#/components/schemas/{model}"
SCHEME = "tiergate_security_scheme"  # the attribute ``security_scheme`` sets on a dependency
F = TypeVar("F", bound=Callable[..., Any])
SECURITY_SCHEMES = {
    "tenantKey": {"type": "http", "scheme": "bearer", "description": "a tenant API key"},
    "adminKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "the admin key (the dashboard uses a session cookie instead)",
    },
    "metricsToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "the scraper token, when metrics.token_* sets one",
    },
}

_MEANING = {
    400: "invalid request (the error's param names the field)",
    401: "missing or wrong key",
    403: "this key may not use this route",
    404: "unknown model, tenant or route",
    408: "the request did not arrive in time",
    409: "the name is taken",
    413: "the body is too large",
    429: "rate limit, exhausted budget, or too many wrong admin keys",
    500: "internal error (generic message and the request id; details in the log)",
    502: "the upstream model failed",
    503: "overloaded or a store is unavailable (Retry-After)",
    504: "the upstream model did not answer in time",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status with the OpenAI error body."""
    return {s: {"model": ErrorResponse, "description": _MEANING[s]} for s in statuses}


_STREAMED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the completion: JSON, or with stream=true server-sent events "
        "(data: chunk lines, an error event on failure, always ending in data: [DONE])",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}
GENERATION_ERRORS = {**_STREAMED, **errors(400, 401, 404, 408, 413, 429, 500, 502, 503, 504)}
ADMIN_ERRORS = errors(400, 401, 403, 404, 429, 500, 503)
# ``/v1/messages*``: Anthropic's error body and statuses (529: overloaded).
MESSAGES_ERRORS: dict[int | str, dict[str, Any]] = {
    **_STREAMED,
    **{
        s: {"model": AnthropicError, "description": _MEANING.get(s, "overloaded (Retry-After)")}
        for s in (400, 401, 403, 404, 408, 413, 429, 500, 502, 503, 504, 529)
    },
}


def security_scheme(name: str) -> Callable[[F], F]:
    """Marks a dependency with the scheme of ``SECURITY_SCHEMES`` it checks."""
    assert name in SECURITY_SCHEMES, name

    def mark(dependency: F) -> F:
        setattr(dependency, SCHEME, name)
        return dependency

    return mark


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def request_body(*models: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra=`` for a route whose JSON body is one of ``models``."""
    schema = _ref(models[0]) if len(models) == 1 else {"anyOf": [_ref(m) for m in models]}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


class GatewayApp(FastAPI):
    """FastAPI whose schema also carries the wire models the routes parse themselves
    (``bodies``: every family's, given by the app as it mounts them)."""

    bodies: Sequence[type[BaseModel]] = ()

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            schema = super().openapi()
            bodies = dict.fromkeys(self.bodies)
            _, defs = models_json_schema([(m, "validation") for m in bodies], ref_template=REF)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(defs.get("$defs", {}))
            _check_refs(schema["paths"], components)
            # Parameter errors answer 400 in OpenAI's shape (gateway.edge.error_boundary), not 422.
            for path in schema["paths"].values():
                for operation in path.values():
                    operation["responses"].pop("422", None)
            components.pop("HTTPValidationError", None)
            components.pop("ValidationError", None)
            schema["components"]["securitySchemes"] = SECURITY_SCHEMES
            self._declare_security(schema["paths"])
            self.openapi_schema = schema
        return self.openapi_schema

    def _declare_security(self, paths: dict[str, Any]) -> None:
        """Each operation names the scheme its one dependency checks (``gateway.edge.deps``)."""
        for route in self.routes:
            if not isinstance(route, APIRoute) or route.path_format not in paths:
                continue
            marked = (getattr(d.call, SCHEME, None) for d in route.dependant.dependencies)
            schemes = {scheme for scheme in marked if scheme is not None}
            for method in route.methods:
                operation = paths[route.path_format].get(method.lower())
                if operation is not None and schemes:
                    operation["security"] = [{name: []} for name in sorted(schemes)]


def _check_refs(paths: dict[str, Any], components: dict[str, Any]) -> None:
    """Every request body a route names is one a family declared."""
    for path, operations in paths.items():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            for ref in [schema, *schema.get("anyOf", ())]:
                name = ref.get("$ref", "").rsplit("/", 1)[-1]
                assert not name or name in components, f"{path}: no family declares {name}"
