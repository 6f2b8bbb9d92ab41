"""One batch line through the serving core, as the endpoint it names would run it.

A line runs as its batch's tenant and key, at ``batch`` priority (the pools give it the
slots interactive requests leave free; it pays the model's batch price), through the
same wire format as the endpoint (``parse``, ``prepare``, the core's ``Run``, ``whole``;
the format its family declares for the path, ``gateway.edge.family.Family.formats``),
asked through the core's one entrance (``gateway.core.entrance.ask_for``) as the HTTP
edge asks: its body is exactly what the endpoint would have answered, and routing (``auto`` and
tiers), both caches, rules, budgets, the ledger, metrics and traces are the core's.

The line's request id is a digest of (tenant, batch, line) in the format's own id shape
(``WireFormat.ids``), the same on every try: a line a dead replica left half-run and
another replica runs again settles under the same id, which the budget store settles once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.core.answer import collect
from gateway.core.entrance import Options, ask_for
from gateway.core.serving_core import ServingCore
from gateway.errors import (
    ApiError,
    InsufficientQuota,
    Overloaded,
    RateLimited,
    ServiceUnavailable,
)
from gateway.types import Outcome
from gateway.wire.common import parse_body
from gateway.wire.embeddings import EMBEDDING_IDS, EmbeddingRequest
from gateway.wire.format import Caller, WireFormat
from policies.tenants import Principal

EMBEDDINGS = "/v1/embeddings"


@dataclass(frozen=True, slots=True)
class LineMoney:
    cost_usd: float = 0.0
    saved_usd: float = 0.0  # the interactive price minus the cost
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Answered:
    """The endpoint's answer: its body, the request id it ran under, what it cost."""

    body: Any
    request_id: str
    money: LineMoney


class Refused(Exception):
    """The endpoint answered with an error (``error``), after charging ``money``."""

    def __init__(self, error: ApiError, request_id: str | None, money: LineMoney) -> None:
        super().__init__(error.message)
        self.error, self.request_id, self.money = error, request_id, money


def waits_for_holds(error: ApiError) -> bool:
    """A budget refusal that requests in flight may undo when they settle (it says when
    to ask again): the budget minus its spend could still pay the line's worst case."""
    return isinstance(error, InsufficientQuota) and "Retry-After" in error.headers


def retryable(error: ApiError) -> bool:
    """Worth another try later: an overloaded pool, a store that is down, a rate limit,
    a budget whose open holds may leave room. A budget that cannot pay the line's worst
    case even once every hold has settled (``insufficient_quota``) is the line's answer."""
    return isinstance(error, Overloaded | ServiceUnavailable | RateLimited) or waits_for_holds(
        error
    )


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
    if endpoint == EMBEDDINGS:
        return await _embeddings(core, principal, body, seed)
    wire = formats[endpoint]
    request_id: str | None = None
    try:
        caller = Caller(principal, core.config, {}, core.parts.responses)
        exchange = await wire.prepare(wire.parse(body), caller)
        request_id = wire.ids.stable(seed)
        # A line is answered whole, and belongs to no conversation (``routing.sessions``).
        turn = replace(exchange.turn, stream=False, session=None)
        ask = ask_for(principal, turn, Options(priority="batch", request_id=request_id))
        run = await core.start(ask)
    except ApiError as exc:
        raise Refused(exc, request_id, LineMoney()) from exc
    try:
        try:
            text, final = await collect(run)
        finally:
            await run.close()
        whole = await exchange.whole(run, text, final)
    except ApiError as exc:
        raise Refused(exc, request_id, _money(run.outcome)) from exc
    return Answered(whole, run.request_id, _money(run.outcome))


def _money(outcome: Outcome | None) -> LineMoney:
    if outcome is None:
        return LineMoney()
    usage = outcome.usage
    return LineMoney(
        outcome.cost_usd,
        outcome.saved_batch_usd,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_tokens,
    )


async def _embeddings(core: ServingCore, principal: Principal, body: bytes, seed: str) -> Answered:
    request_id = EMBEDDING_IDS.stable(seed)
    try:
        request = parse_body(EmbeddingRequest, body)
        options = Options(priority="batch", request_id=request_id)
        embedded = await core.embed(principal, request, options)
    except ApiError as exc:
        raise Refused(exc, request_id, LineMoney()) from exc
    return Answered(embedded.body, request_id, _money(embedded.outcome))


def input_of(raw: bytes) -> tuple[str, bytes]:
    """A stored line's custom id and request body."""
    line = orjson.loads(raw)
    return str(line["custom_id"]), orjson.dumps(line["body"])
