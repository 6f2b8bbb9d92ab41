"""``POST /v1/completions`` (legacy text completions, ``gateway.completions.render``)
over the serving core."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.completions.protocol import CompletionRequest
from gateway.completions.render import COMPLETIONS
from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import TracedEndpoint
from gateway.edge.openapi import GENERATION_ERRORS, request_body
from gateway.edge.respond import serve

PATH = "/v1/completions"  # served in the COMPLETIONS format (``FAMILY.formats``)
endpoints = APIRouter(route_class=TracedEndpoint, tags=["v1"], responses=GENERATION_ERRORS)


@endpoints.post(PATH, name="text_completion", openapi_extra=request_body(CompletionRequest))
async def completions(request: Request, call: TenantDep) -> Response:
    return await serve(request, call, COMPLETIONS)


FAMILY = Family((endpoints,), bodies=(CompletionRequest,), formats={PATH: COMPLETIONS})
