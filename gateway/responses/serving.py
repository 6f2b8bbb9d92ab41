"""The Responses wire format: a format with state of its own.

``prepare`` loads the stored conversation ``previous_response_id`` continues (the key's
own, ``policies.stores.responses``), translates the turn by the tenant's compatibility
mode (``gateway.responses.translate``) and refuses a conversation too large to keep. Its
``Exchange`` echoes the request in every Response (``gateway.responses.render``) and,
with ``store`` (the default), keeps the Response before the client sees it end, so a
follow-up with ``previous_response_id`` always finds it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from backends.base import Chunk
from gateway.errors import ApiError, InvalidRequest
from gateway.guardrails.policy import policy_for
from gateway.guardrails.redactor import Redactor
from gateway.responses.protocol import CreateResponse
from gateway.responses.render import TERMINAL, Echo, ResponseEvents, whole_response
from gateway.responses.translate import RESPONSE_IDS, Translation, to_generation
from gateway.wire.common import body_session, parse_body
from gateway.wire.errors import ErrorShape, openai_error
from gateway.wire.format import Caller, Exchange, RunView, Turn
from gateway.wire.sse import Event, Framing, named_events
from policies.responses_spec import ResponsesConfig
from policies.stores.responses import ResponseStore, StoredResponse, input_fits, input_size
from policies.stores.store import StoreUnavailable
from policies.tenants import Principal
from routers.session import SessionHint

log = logging.getLogger(__name__)


class ResponsesFormat:
    body_model = CreateResponse
    ids = RESPONSE_IDS

    @property
    def error_shape(self) -> ErrorShape:
        return openai_error

    def parse(self, raw: bytes) -> CreateResponse:
        return parse_body(CreateResponse, raw)

    async def prepare(self, body: CreateResponse, caller: Caller) -> Exchange:
        principal, store = caller.principal, caller.responses
        history, chain = await _history(store, principal, body.previous_response_id)
        translation = to_generation(body, history, principal.policy.compat)
        limits = caller.config.responses
        if body.store and not input_fits(limits, translation.items):
            raise InvalidRequest(
                f"the conversation is over the stored size cap ({limits.max_bytes} "
                "bytes): send store: false, or a shorter input",
                param="store",
            )
        if body.store and not await store.room(limits, principal, input_size(translation.items)):
            raise InvalidRequest(
                f"this tenant keeps its most stored Responses ({limits.tenant_max_count} or "
                f"{limits.tenant_max_bytes} bytes): delete some, or send store: false",
                param="store",
                code="stored_responses_limit",
            )
        session = chain or body_session(body.model_extra, body.user)
        return ResponseExchange(store, principal, body, translation, limits, session)


RESPONSES = ResponsesFormat()


async def load(
    store: ResponseStore, principal: Principal, response_id: str
) -> StoredResponse | None:
    """The key's stored Response (None: not there, or another key's)."""
    return await store.load(principal, response_id)


async def _history(
    store: ResponseStore, principal: Principal, previous: str | None
) -> tuple[list[dict[str, Any]], SessionHint | None]:
    """The conversation ``previous`` continues, and the session its chain is in (kept
    with every stored Response of the chain since its first)."""
    if previous is None:
        return [], None
    record = await load(store, principal, previous)
    if record is None:
        raise InvalidRequest(
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    chain = None if record.session is None else SessionHint("response", record.session)
    return record.conversation(), chain


class ResponseExchange:
    """One create call: what its Response echoes, and keeping it when ``store``."""

    def __init__(
        self,
        store: ResponseStore,
        principal: Principal,
        body: CreateResponse,
        translation: Translation,
        config: ResponsesConfig,  # the request's snapshot
        session: SessionHint | None = None,
    ) -> None:
        self.store, self.principal, self.body = store, principal, body
        self.translation, self.config = translation, config
        self.turn = Turn(
            body.model,
            translation.generation,
            body.stream,
            True,
            body.metadata,
            translation.compat,
            session,
        )
        self.renderer: ResponseEvents | None = None

    @property
    def framing(self) -> Framing:
        """Built when the stream starts, not kept: an exchange holding a framing that holds
        its bound ``_failure`` would be a reference cycle (garbage for the collector)."""
        return named_events(self._failure)

    def echo(self, run: RunView) -> Echo:
        body, text = self.body, self.body.text
        text_format = text.format if text is not None else None
        fields = {
            "instructions": body.instructions,
            "tools": list(self.translation.tools),
            "tool_choice": self.translation.tool_choice,
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
        return Echo(run.request_id, run.model, fields, self.translation.namespaces, run.created)

    async def whole(self, run: RunView, text: str, final: Chunk) -> Event:
        return await self._kept(whole_response(self.echo(run), text, final), run.session_id)

    async def events(self, run: RunView, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Event]:
        self.renderer = renderer = ResponseEvents(self.echo(run))
        async for event in renderer.events(chunks):
            if event["type"] in TERMINAL:
                kept = await self._kept(event["response"], run.session_id)
                event = {**event, "response": kept}
            yield event

    def _failure(self, error: ApiError) -> Sequence[Event]:
        assert self.renderer is not None, "the stream fails only once it has begun"
        return self.renderer.failed(error)

    async def _kept(self, response: dict[str, Any], session: str | None) -> dict[str, Any]:
        """The Response, kept first when ``store`` (with its session: a continuation
        stays in it); one that could not be kept says so."""
        if not self.body.store:
            return response
        items, kept_response = self.translation.items, response
        policy = policy_for(self.principal)
        if policy is not None:  # kept as the engine saw it: redacted (restore is the caller's)
            redactor = Redactor(policy, enforce=False)
            items, kept_response = redactor.walk(items), redactor.walk(response)
        record = StoredResponse(items, kept_response, session)
        try:
            kept = await self.store.save(self.config, self.principal, record)
        except StoreUnavailable as exc:
            log.warning("response %s not stored: %s", response["id"], exc)
            kept = False
        return response if kept else {**response, "store": False}
