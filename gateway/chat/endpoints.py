"""``POST /v1/chat/completions``: Chat Completions (``gateway.chat.render``) over the
serving core."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.chat.protocol import ChatCompletionRequest
from gateway.chat.render import CHAT
from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import TracedEndpoint
from gateway.edge.openapi import GENERATION_ERRORS, request_body
from gateway.edge.respond import serve

PATH = "/v1/chat/completions"  # served in the CHAT format (``FAMILY.formats``)
endpoints = APIRouter(route_class=TracedEndpoint, tags=["v1"], responses=GENERATION_ERRORS)


@endpoints.post(PATH, name="chat", openapi_extra=request_body(ChatCompletionRequest))
async def chat_completions(request: Request, call: TenantDep) -> Response:
    return await serve(request, call, CHAT)


FAMILY = Family((endpoints,), bodies=(ChatCompletionRequest,), formats={PATH: CHAT})
