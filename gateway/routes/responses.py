"""``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}``, ``GET …/input_items``.

A Responses request runs exactly as a chat request does (``core.route`` and one ``Run``
on the serving core: auth, rate limits, budget, both caches, ``auto``, ledger, metrics,
traces); only the translation (``gateway.wire.responses_input``) and the rendering
(``gateway.wire.responses_output``) are its own. Fields the gateway accepts without
honouring are named in ``x-tiergate-ignored`` (``gateway.wire.compat``). With ``store`` (the
default) the Response is kept for its key (``gateway.wire.responses_store``) before the
client sees it end, so a follow-up with ``previous_response_id`` always finds it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import Response

from backends.base import Chunk
from gateway.core.respond import ask_for, collect, stream_response
from gateway.core.serving import Run
from gateway.core.timing import lap
from gateway.edge.deps import TenantDep
from gateway.edge.http import TracedRoute, read_body, until_disconnect
from gateway.edge.openapi import GENERATION_ERRORS, request_body
from gateway.errors import ApiError, InvalidRequest, NotFound, ServiceUnavailable
from gateway.wire.common import parse_body
from gateway.wire.compat import unsupported
from gateway.wire.format import RunView
from gateway.wire.responses import CreateResponse
from gateway.wire.responses_input import Translation, to_generation
from gateway.wire.responses_output import (
    TERMINAL,
    Echo,
    ResponseEvents,
    whole_response,
)
from gateway.wire.responses_store import ResponseStore, StoredResponse, input_fits
from gateway.wire.sse import Event, named_events
from policies.responses_spec import ResponsesConfig
from policies.store import StoreUnavailable
from policies.tenants import Principal

log = logging.getLogger(__name__)

router = APIRouter(route_class=TracedRoute, tags=["v1"], responses=GENERATION_ERRORS)
stored = APIRouter(tags=["v1"], responses=GENERATION_ERRORS)


@router.post("/v1/responses", name="responses", openapi_extra=request_body(CreateResponse))
async def create_response(request: Request, call: TenantDep) -> Response:
    core, principal = call.core, call.principal
    config, store = core.config, core.parts.responses  # the request's snapshot
    raw = await read_body(request, config.server.max_body_bytes, config.server.header_timeout_s)
    body = parse_body(CreateResponse, raw)
    history = await _history(store, principal, body.previous_response_id)
    turn = to_generation(body, history, principal.policy.compat)
    if body.store and not input_fits(config.responses, turn.items):
        raise InvalidRequest(
            f"the conversation is over the stored size cap ({config.responses.max_bytes} "
            "bytes): send store: false, or a shorter input",
            param="store",
        )
    lap("parse")
    ask = ask_for(
        request,
        principal,
        body.model,
        turn.generation,
        stream=body.stream,
        include_usage=True,
        metadata=body.metadata,
    )
    routed = await core.route(ask)
    lap("route")
    turn.compat.record()
    session = _Session(store, principal, body, turn, config.responses)
    run = core.run(routed)
    if routed.stream:
        return await stream_response(
            run, session.events, session.framing, turn.compat.headers().items()
        )
    response = await session.whole(request, run)
    response.headers.update(turn.compat.headers())
    return response


async def _history(
    store: ResponseStore, principal: Principal, previous: str | None
) -> list[dict[str, Any]]:
    if previous is None:
        return []
    record = await _load(store, principal, previous)
    if record is None:
        raise InvalidRequest(
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return record.conversation()


async def _load(
    store: ResponseStore, principal: Principal, response_id: str
) -> StoredResponse | None:
    try:
        return await store.load(principal, response_id)
    except StoreUnavailable:
        raise ServiceUnavailable("the response store is unreachable") from None


class _Session:
    """One create call: what its Response echoes, and keeping it when ``store``."""

    def __init__(
        self,
        store: ResponseStore,
        principal: Principal,
        body: CreateResponse,
        turn: Translation,
        config: ResponsesConfig,  # the request's snapshot
    ) -> None:
        self.store, self.principal, self.body, self.turn = store, principal, body, turn
        self.config = config
        self.renderer: ResponseEvents | None = None
        self.framing = named_events(self._failure)

    def echo(self, run: RunView) -> Echo:
        body, text = self.body, self.body.text
        text_format = text.format if text is not None else None
        fields = {
            "instructions": body.instructions,
            "tools": list(self.turn.tools),
            "tool_choice": self.turn.tool_choice,
            "parallel_tool_calls": True
            if body.parallel_tool_calls is None
            else body.parallel_tool_calls,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "top_p": 1.0 if body.top_p is None else body.top_p,
            "max_output_tokens": body.max_output_tokens,
            "previous_response_id": body.previous_response_id,
            "store": body.store,
            "text": {
                "format": (
                    text_format.model_dump(exclude_none=True, by_alias=True)
                    if text_format is not None
                    else {"type": "text"}
                ),
                "verbosity": "medium",
            },
            "metadata": body.metadata or {},
            "reasoning": {"effort": None, "summary": None},
            "truncation": "disabled",
            "background": False,
            "service_tier": "default",
            "user": body.user,
        }
        return Echo(run.request_id, run.model, fields, self.turn.namespaces, run.created)

    async def whole(self, request: Request, run: Run) -> Response:
        try:
            text, final = await until_disconnect(request, collect(run))
        finally:
            await run.close()
        body = await self._kept(whole_response(self.echo(run), text, final))
        return Response(orjson.dumps(body), media_type="application/json", headers=run.headers())

    async def events(self, run: RunView, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Event]:
        self.renderer = renderer = ResponseEvents(self.echo(run))
        async for event in renderer.events(chunks):
            if event["type"] in TERMINAL:
                event = {**event, "response": await self._kept(event["response"])}
            yield event

    def _failure(self, error: ApiError) -> Sequence[Event]:
        assert self.renderer is not None, "the stream fails only once it has begun"
        return self.renderer.failed(error)

    async def _kept(self, response: dict[str, Any]) -> dict[str, Any]:
        """The Response, kept first when ``store``; one that could not be kept says so."""
        if not self.body.store:
            return response
        record = StoredResponse(self.turn.items, response)
        try:
            kept = await self.store.save(self.config, self.principal, record)
        except StoreUnavailable as exc:
            log.warning("response %s not stored: %s", response["id"], exc)
            kept = False
        return response if kept else {**response, "store": False}


@stored.get("/v1/responses/{response_id}", name="get_response")
async def get_response(response_id: str, call: TenantDep, stream: bool = False) -> Response:
    if stream:
        raise unsupported("stream", "a stored response is not replayed as events")
    record = await _owned(call.core.parts.responses, call.principal, response_id)
    return _json(record.response)


@stored.delete("/v1/responses/{response_id}", name="delete_response")
async def delete_response(response_id: str, call: TenantDep) -> Response:
    try:
        deleted = await call.core.parts.responses.delete(call.principal, response_id)
    except StoreUnavailable:
        raise ServiceUnavailable("the response store is unreachable") from None
    if not deleted:
        raise _missing(response_id)
    return _json({"id": response_id, "object": "response", "deleted": True})


@stored.get("/v1/responses/{response_id}/input_items", name="response_input_items")
async def input_items(
    response_id: str,
    call: TenantDep,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Response:
    record = await _owned(call.core.parts.responses, call.principal, response_id)
    items = list(record.input if order == "asc" else reversed(record.input))
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise InvalidRequest(f"no input item {after!r} in this response", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return _json(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


async def _owned(store: ResponseStore, principal: Principal, response_id: str) -> StoredResponse:
    record = await _load(store, principal, response_id)
    if record is None:
        raise _missing(response_id)
    return record


def _missing(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")
