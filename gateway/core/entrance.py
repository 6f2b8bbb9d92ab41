"""The one entrance into the serving core: who asks, the format's turn and the options
the core honours, as the ``Ask`` the core runs (``ServingCore.start``) or only routes
(``ServingCore.route``). The only place an ``Ask`` is built, for every caller: the HTTP
edge (its options read from the request's headers, ``gateway.edge.respond.core_headers``),
a batch line, ``/v1/route`` and count_tokens. Nothing here reads a header.

An embeddings call is no generation and takes no ``Ask``: its endpoint and a batch line
hand ``ServingCore.embed`` the request and the same ``Options`` (of which it honours the
``priority`` and the ``request_id``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from backends.base import GenerationRequest, Priority
from gateway.types import Ask
from gateway.wire.compat import Compat
from gateway.wire.format import Turn
from policies.tenants import Principal
from routers.session import SessionHint


@dataclass(frozen=True, slots=True)
class Options:
    """What the core honours beside the format's turn."""

    cache_control: str | None = None  # no-cache, no-store (``Cache-Control``)
    forced_tier: str | None = None  # where the tenant allows it (``x-tiergate-tier``)
    session: SessionHint | None = None  # the caller's, before anything the body says
    priority: Priority = "interactive"  # "batch": a batch line (batch prices, spare slots)
    request_id: str | None = None  # a stable id (a batch line's: the same on every try)


def ask_for(principal: Principal, turn: Turn, options: Options) -> Ask:
    """The request as the core takes it."""
    generation = turn.generation
    if options.request_id is not None:
        generation = replace(generation, request_id=options.request_id)
    return Ask(
        principal,
        turn.model,
        generation,
        stream=turn.stream,
        include_usage=turn.include_usage,
        cache_control=options.cache_control,
        forced_tier=options.forced_tier,
        metadata=turn.metadata or None,
        priority=options.priority,
        session=options.session or turn.session,
    )


def tier_only(
    model: str, generation: GenerationRequest, session: SessionHint | None = None
) -> Turn:
    """A request asked only for its tier (``/v1/route``, count_tokens): nothing answers
    it, so it neither streams nor carries an annotation for the ledger."""
    return Turn(model, generation, False, False, None, Compat(), session)
