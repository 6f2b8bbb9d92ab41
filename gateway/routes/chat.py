"""``POST /v1/chat/completions``: Chat Completions (``gateway.wire.chat_render``) over the
serving core."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.respond import serve
from gateway.edge.deps import TenantDep
from gateway.edge.http import TracedRoute
from gateway.edge.openapi import GENERATION_ERRORS, request_body
from gateway.wire.chat import ChatCompletionRequest
from gateway.wire.chat_render import CHAT

router = APIRouter(route_class=TracedRoute, tags=["v1"], responses=GENERATION_ERRORS)


@router.post("/v1/chat/completions", name="chat", openapi_extra=request_body(ChatCompletionRequest))
async def chat_completions(request: Request, call: TenantDep) -> Response:
    return await serve(request, call, CHAT)
