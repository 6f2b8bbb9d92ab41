"""One batch line through the serving core, as the endpoint it names would run it.

A line runs as its batch's tenant and key, at ``batch`` priority (the slots interactive
requests leave free, the model's batch price), entering the core as the HTTP edge does:
a generation in its family's format for the path (``parse``, ``prepare``, ``ask_for``,
``whole``), an embedding through ``ServingCore.embed``. Its body is what the endpoint
would have answered; all else is the core's, its money its run's ``Outcome`` included.

The line's request id is a digest of (tenant, batch, line) in the format's own id shape
(``WireFormat.ids``), the same on every try: a line a dead replica left half-run and
another replica runs again settles under the same id, which the budget store settles once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.batches.protocol import EMBEDDINGS_ENDPOINT
from gateway.batches.results import Answered, LineMoney, Refused
from gateway.core.answer import collect
from gateway.core.entrance import Options, ask_for
from gateway.core.serving_core import ServingCore
from gateway.errors import ApiError
from gateway.wire.common import parse_body
from gateway.wire.embeddings import EMBEDDING_IDS, EmbeddingRequest
from gateway.wire.format import Caller, WireFormat
from policies.tenants import Principal


async def answer(
    core: ServingCore,
    formats: Mapping[str, WireFormat[Any]],
    principal: Principal,
    endpoint: str,
    body: bytes,
    seed: str,
) -> Answered:
    """The line's answer; raises ``Refused`` with the endpoint's error. ``formats``: each
    generation path's wire format, as its family declares it (``gateway.app.FORMATS``)."""
    if endpoint == EMBEDDINGS_ENDPOINT:
        return await _embeddings(core, principal, body, seed)
    wire = formats[endpoint]
    request_id: str | None = None
    try:
        caller = Caller(principal, core.config, {}, core.parts.responses)
        exchange = await wire.prepare(wire.parse(body), caller)
        request_id = wire.ids.stable(seed)
        # A line is answered whole, and belongs to no conversation (``routing.sessions``).
        turn = replace(exchange.turn, stream=False, session=None)
        options = Options(priority="batch", request_id=request_id)
        run = await core.start(ask_for(principal, turn, options))
    except ApiError as exc:
        raise Refused(exc, request_id, LineMoney()) from exc
    try:
        try:
            text, final = await collect(run)
        finally:
            await run.close()
        whole = await exchange.whole(run, text, final)
    except ApiError as exc:
        raise Refused(exc, request_id, LineMoney.of(run.outcome)) from exc
    return Answered(whole, run.request_id, LineMoney.of(run.outcome))


async def _embeddings(core: ServingCore, principal: Principal, body: bytes, seed: str) -> Answered:
    request_id = EMBEDDING_IDS.stable(seed)
    try:
        request = parse_body(EmbeddingRequest, body)
        options = Options(priority="batch", request_id=request_id)
        embedded = await core.embed(principal, request, options)
    except ApiError as exc:
        raise Refused(exc, request_id, LineMoney()) from exc
    return Answered(embedded.body, request_id, LineMoney.of(embedded.outcome))
