"""Admission (rate limits, then a budget reservation) and settlement of one request.

``admit`` runs before dispatch: it may refuse (429), fail closed (503), or move the
request to a cheaper tier the tenant can afford. ``settle`` runs once the request has
ended in any way and charges the ``Outcome``'s cost, writing the ledger event with it.
Every read of the config is of the request's snapshot (``routed.config``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.errors import InsufficientQuota, RateLimited, ServiceUnavailable
from gateway.outcome import Outcome
from gateway.spend import (
    WorstCase,
    completion_cap,
    downgrade_tiers,
    prompt_upper_tokens,
    worst_cases,
)
from gateway.state import GatewayState
from gateway.timing import timed
from policies.budget import GLOBAL_SCOPE, Denied, Reservation
from policies.ledger import SpendEvent, now
from policies.schema import GatewayConfig
from policies.spending import budget_scopes, rate_scopes
from policies.store import StoreUnavailable
from policies.tenants import Principal
from routers.decision import TierDecision

if TYPE_CHECKING:
    from gateway.routing import RoutedRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TierReservation:
    """Money held for ``tier``, the most capable candidate whose worst case fitted."""

    tier: str
    worst: WorstCase
    reservation: Reservation | None  # None: the store was down and the tenant fails open


@dataclass(frozen=True, slots=True)
class Ticket:
    """What admission decided; settlement needs it."""

    held: TierReservation
    requested_tier: str
    prompt_upper: int
    rate_tokens: int  # what the token rate limit counted at admission
    headers: tuple[tuple[str, str], ...]

    @property
    def downgraded(self) -> bool:
        return self.held.tier != self.requested_tier

    @property
    def completion_cap(self) -> int:
        """The completion tokens the reservation was sized for (before per-model caps)."""
        return self.held.worst.completion_tokens


class Admitted(Protocol):
    """What settlement needs of a request: a ``RoutedRequest``, or an embeddings call."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def request_id(self) -> str: ...
    @property
    def principal(self) -> Principal: ...


async def reserve_best_tier(
    config: GatewayConfig,
    state: GatewayState,
    principal: Principal,
    request_id: str,
    worst: Sequence[WorstCase],
) -> TierReservation | Denied:
    """The budget side of budget-aware routing: one atomic reservation, on every scope of
    this tenant and key, for the first (most capable) candidate whose worst case fits.

    ``worst`` is most capable first. Raises ``ServiceUnavailable`` (503
    budget_unavailable) when the store is down and the tenant does not fail open."""
    tiers = [w.tier for w in worst]
    scopes = budget_scopes(config, principal)
    try:
        result = await state.budgets.reserve(request_id, scopes, [w.usd for w in worst])
    except StoreUnavailable as exc:
        if not principal.policy.budget_fail_open:
            log.warning("budget store unreachable, refusing %s: %s", request_id, exc)
            raise ServiceUnavailable(
                "the budget store is unreachable; try again shortly",
                code="budget_unavailable",
                headers={"Retry-After": "2"},
            ) from exc
        log.warning("budget store down; tenant %s fails open: %s", principal.tenant, exc)
        return TierReservation(tiers[0], worst[0], None)
    if isinstance(result, Denied):
        return result
    return TierReservation(tiers[result.choice], worst[result.choice], result)


async def _check_rate(
    state: GatewayState, principal: Principal, request_id: str, tokens: int
) -> dict[str, str]:
    scopes = rate_scopes(principal)
    if not scopes:
        return {}
    try:
        decision = await state.limiter.acquire(request_id, scopes, tokens)
    except StoreUnavailable as exc:
        if principal.policy.rate_limit_fail_open:
            log.warning("rate-limit store down; tenant %s fails open: %s", principal.tenant, exc)
            return {}
        raise ServiceUnavailable(
            "the rate-limit store is unreachable; try again shortly",
            code="rate_limit_unavailable",
            headers={"Retry-After": "2"},
        ) from exc
    headers = decision.headers()
    if not decision.allowed:
        raise RateLimited(
            f"Rate limit reached for {decision.refused_by}; retry after "
            f"{decision.retry_after_s:.1f}s.",
            headers=headers,
        )
    return headers


async def admit(state: GatewayState, routed: RoutedRequest) -> tuple[TierDecision, Ticket]:
    """The decision to run on (moved down if the budget asked for it) and the ticket to
    settle with; raises the refusal otherwise (``RateLimited``, ``InsufficientQuota``)."""
    config, principal = routed.config, routed.principal
    generation = routed.generation
    rate_tokens = prompt_upper_tokens(config, generation, routed.tier)
    rate_tokens += completion_cap(config, generation, routed.tier)
    policy = principal.policy
    tiers = (
        downgrade_tiers(config, policy, routed.tier)
        if policy.on_budget_exceeded == "downgrade"
        else [routed.tier]
    )
    worst = worst_cases(config, tiers, generation, routed.decision.pinned_model)
    ticket = await admit_worst(state, routed, worst, rate_tokens)
    decision = routed.decision
    if ticket.downgraded:
        decision = decision.moved(
            ticket.held.tier, f"budget: downgraded {routed.tier} -> {ticket.held.tier}"
        )
    return decision, ticket


async def admit_worst(
    state: GatewayState,
    call: Admitted,
    worst: Sequence[WorstCase],
    rate_tokens: int,
) -> Ticket:
    """Rate limits (``rate_tokens`` against tokens-per-minute), then one reservation for
    the first of ``worst`` that fits; the first one is what was asked for. Raises the
    refusal (``RateLimited``, ``InsufficientQuota``, ``ServiceUnavailable``)."""
    config, principal, request_id = call.config, call.principal, call.request_id
    headers = await _check_rate(state, principal, request_id, rate_tokens)
    held = await reserve_best_tier(config, state, principal, request_id, worst)
    if isinstance(held, Denied):
        if headers:  # admitted by the rate limit: a refused request used no tokens
            await correct_tokens(state, call, rate_tokens, 0)
        if held.scope == GLOBAL_SCOPE:  # the other tenants' spend is not this caller's business
            detail = "the gateway's overall budget is spent"
        else:
            detail = f"{held.scope}: ${max(held.remaining_usd, 0.0):.6f} left"
        raise InsufficientQuota(
            f"You exceeded your current quota ({detail}; this request may cost up to "
            f"${held.needed_usd:.6f}).",
            headers=headers,
        )
    # Without reported usage the prompt is charged as the held tier's worst case.
    prompt_upper = held.worst.prompt_tokens
    return Ticket(held, worst[0].tier, prompt_upper, rate_tokens, tuple(headers.items()))


def spend_event(routed: Admitted, outcome: Outcome, downgraded: bool) -> SpendEvent:
    usage = outcome.usage
    return SpendEvent(
        ts=now(),
        request_id=routed.request_id,
        tenant=routed.principal.tenant,
        key_id=routed.principal.key_id,
        tier=outcome.tier,
        model=outcome.model,
        status=outcome.status,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        completion_tokens=usage.completion_tokens,
        cost_usd=outcome.cost_usd,
        saved_routing_usd=outcome.saved_routing_usd,
        saved_cache_usd=outcome.saved_cache_usd,
        cache=outcome.cache,
        latency_ms=outcome.latency_s * 1000,
        ttft_ms=(outcome.first_token_s or outcome.latency_s) * 1000,
        downgraded=downgraded,
    )


async def settle(state: GatewayState, routed: Admitted, ticket: Ticket, outcome: Outcome) -> None:
    """Charge the outcome's cost against the reservation and append its ledger event."""
    event = spend_event(routed, outcome, ticket.downgraded)
    reservation = ticket.held.reservation
    # What the store refuses now is journaled and settled once it is back, never lost.
    if reservation is None:  # failed open: no hold, but the counters still get the spend
        scopes = budget_scopes(routed.config, routed.principal)
        await state.journal.charge(routed.request_id, scopes, outcome.cost_usd, event)
    else:
        await state.journal.settle(reservation, outcome.cost_usd, event)
    if ticket.headers:
        await correct_tokens(state, routed, ticket.rate_tokens, outcome.usage.total_tokens)


async def correct_tokens(
    state: GatewayState, routed: Admitted, estimated: int, actual: int
) -> None:
    """Count the request's real tokens against tokens-per-minute instead of its estimate."""
    scopes = [s for s in rate_scopes(routed.principal) if s.spec.tokens_per_minute is not None]
    if not scopes:
        return
    try:
        await state.limiter.correct(routed.request_id, scopes, estimated, actual)
    except StoreUnavailable as exc:
        log.warning("could not correct the token count of %s: %s", routed.request_id, exc)


async def record_denied(state: GatewayState, routed: Admitted, outcome: Outcome) -> None:
    """A refused request's ledger event (``kind="denied"``, the reason as its status)."""
    event = SpendEvent(
        ts=now(),
        request_id=routed.request_id,
        tenant=routed.principal.tenant,
        key_id=routed.principal.key_id,
        tier=outcome.tier,
        model=outcome.model,
        kind="denied",
        status=outcome.denied or "refused",
    )
    try:
        await state.ledger.record(event)
    except StoreUnavailable as exc:
        log.warning("could not record a denied request: %s", exc)


def settle_later(
    state: GatewayState, routed: Admitted, ticket: Ticket | None, outcome: Outcome
) -> asyncio.Task[None] | None:
    """Settle ``ticket`` (or record the refusal in ``outcome.denied``) in a task of its own,
    held in ``state.background`` so that a request cancelled meanwhile still settles; None
    when there is nothing to settle. The task never raises."""
    if ticket is None and outcome.denied is None:
        return None
    task = asyncio.ensure_future(_settle_logged(state, routed, ticket, outcome))
    state.background.add(task)
    task.add_done_callback(state.background.discard)
    return task


async def _settle_logged(
    state: GatewayState, routed: Admitted, ticket: Ticket | None, outcome: Outcome
) -> None:
    try:
        with timed("budget.settle"):
            if ticket is not None:
                await settle(state, routed, ticket, outcome)
            else:
                await record_denied(state, routed, outcome)
    except Exception:  # any failure: log it; it must never turn an answer into a 500
        log.exception("settling %s failed", routed.request_id)


def keep_alive(
    state: GatewayState, config: GatewayConfig, ticket: Ticket
) -> asyncio.Task[None] | None:
    """While the request runs, push its hold's deadline out every third of the TTL, so
    only a replica that died (and stopped beating) lets its holds lapse."""
    reservation = ticket.held.reservation
    if reservation is None:
        return None
    period = config.budgets.reservation_ttl_s / 3

    async def beat() -> None:
        while True:
            await asyncio.sleep(period)
            try:
                alive = await state.budgets.extend(reservation)
            except StoreUnavailable as exc:
                log.warning("could not extend the hold of %s: %s", reservation.request_id, exc)
                continue
            if not alive:
                log.warning("the hold of %s lapsed while it ran", reservation.request_id)
                return

    return asyncio.ensure_future(beat())
