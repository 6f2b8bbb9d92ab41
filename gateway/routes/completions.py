"""``POST /v1/completions`` (legacy text completions, ``gateway.wire.completions_render``)
over the serving core."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.respond import serve
from gateway.edge.deps import TenantDep
from gateway.edge.http import TracedRoute
from gateway.edge.openapi import GENERATION_ERRORS, request_body
from gateway.wire.completions import CompletionRequest
from gateway.wire.completions_render import COMPLETIONS

router = APIRouter(route_class=TracedRoute, tags=["v1"], responses=GENERATION_ERRORS)


@router.post(
    "/v1/completions", name="text_completion", openapi_extra=request_body(CompletionRequest)
)
async def completions(request: Request, call: TenantDep) -> Response:
    return await serve(request, call, COMPLETIONS)
