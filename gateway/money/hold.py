"""One request's money behind one handle, as httpx's ``Client.stream`` owns a response.

``Hold.open`` checks the rate limits and reserves the worst case (``admit_worst``: 429,
503 fail-closed, or the money held for a cheaper tier the tenant can afford), then keeps
the hold alive with a heartbeat while the request runs; ``run_cap`` is what the engine
may generate on a tier without outgrowing the reservation; ``close(outcome)`` stops the
heartbeat and settles what the request came to (``settle``: the charge and its ledger
event) or records its refusal (``outcome.denied``), in a task of its own::

    hold = Hold(money, config, call, worst, rate_tokens)
    try:
        await hold.open()          # raises the refusal; its ``denied`` names the reason
        ...                        # the request runs
    finally:
        await hold.close(outcome)  # once the request has ended, however it ended

A stream is closed by the response writing it, in another task. The hold never asks
its request anything: the request computes its one ``Outcome`` and hands it over. Every
function here takes the ``Money`` collaborator (the stores) and the request's config
snapshot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from backends.base import Usage
from gateway.errors import ApiError, InsufficientQuota, RateLimited, ServiceUnavailable
from gateway.money.heartbeat import Heartbeat, keep_alive
from gateway.money.spend import WorstCase, admission_worst, escalation_worst, run_cap
from gateway.telemetry.timing import timed
from policies.schema import GatewayConfig
from policies.stores.budget import GLOBAL_SCOPE, BudgetStore, Denied, Reservation
from policies.stores.ledger import Ledger, SpendEvent, bounded_metadata
from policies.stores.ratelimit import RateLimiter
from policies.stores.settle_journal import SettleJournal
from policies.stores.spending import budget_scopes, rate_scopes
from policies.stores.store import StoreUnavailable
from policies.tenants import Principal

if TYPE_CHECKING:
    from gateway.types import RoutedRequest

log = logging.getLogger(__name__)

# A budget refusal that holds still open may undo says when to ask again (seconds): a hold
# lives as long as its request, most of them well under this.
HOLDS_RETRY_AFTER = "1"


@dataclass(frozen=True, slots=True)
class Money:
    """The stores a request's money goes through, built once at startup."""

    budgets: BudgetStore
    limiter: RateLimiter
    journal: SettleJournal  # settles the store refuses wait here (and on disk) until it is back
    ledger: Ledger
    # Settlements run as their own tasks so a cancelled request still settles; the
    # lifespan waits for them before closing the store.
    background: set[asyncio.Task[None]]


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
    def escalation_held(self) -> bool:
        """Both attempts of an escalation are held (else the router's tier runs alone)."""
        return self.held.worst.attempts == 2

    @property
    def completion_cap(self) -> int:
        """The completion tokens the reservation was sized for (before per-model caps)."""
        return self.held.worst.completion_tokens


class Admitted(Protocol):
    """What settlement needs of a request (its config snapshot comes beside it): a
    generation's ``Ask``, an embeddings call or an MCP tool call."""

    @property
    def request_id(self) -> str: ...
    @property
    def principal(self) -> Principal: ...
    @property
    def metadata(self) -> Mapping[str, str] | None: ...  # the client's, for the ledger


class Concluded(Protocol):
    """What a request came to, as settlement reads it: a generation's or an embeddings
    call's ``Outcome`` (``gateway.types``), or an MCP tool call's (``gateway.mcp``)."""

    @property
    def denied(self) -> str | None: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def rate_tokens(self) -> int: ...  # what tokens-per-minute counts: every attempt's
    def ledger_event(
        self,
        request_id: str,
        principal: Principal,
        downgraded: bool,
        metadata: Mapping[str, str] | None = None,
    ) -> SpendEvent: ...
    def denial_event(
        self, request_id: str, principal: Principal, metadata: Mapping[str, str] | None = None
    ) -> SpendEvent: ...


class Hold:
    """Reservation, heartbeat, run cap and settlement of one request."""

    def __init__(
        self,
        money: Money,
        config: GatewayConfig,
        call: Admitted,
        worst: Sequence[WorstCase],
        rate_tokens: int,
    ) -> None:
        self.money, self.config, self.call = money, config, call
        self.worst, self.rate_tokens = worst, rate_tokens
        self.ticket: Ticket | None = None
        self._heartbeat: Heartbeat | None = None
        self._settling: asyncio.Task[None] | None = None

    @classmethod
    def for_generation(cls, money: Money, routed: RoutedRequest) -> Hold:
        """A generation's hold: with an escalation plan, both attempts' worst cases as
        one candidate first; then its tier's worst case (the router's tier alone, no
        escalation), then (a ``downgrade`` tenant) the cheaper tiers it may be moved to,
        most capable first."""
        config, decision, ask = routed.config, routed.decision, routed.ask
        worst, rate_tokens = admission_worst(
            config,
            ask.generation,
            decision.tier,
            ask.principal.policy,
            decision.pinned_model,
            routed.batch,
        )
        plan = routed.escalation
        if plan is not None:
            both = escalation_worst(config, ask.generation, decision.tier, plan.cheap, plan.then)
            worst = [both, *worst]
            rate_tokens += both.prompt_tokens + both.completion_tokens  # the cheap attempt
        return cls(money, config, ask, worst, rate_tokens)

    async def open(self) -> Ticket:
        """Rate limits, then one reservation; raises the refusal (``RateLimited``,
        ``InsufficientQuota``, ``ServiceUnavailable``: ``refusal`` names it for the
        request's ``Outcome``). Nothing is held after a refusal."""
        ticket = await admit_worst(self.money, self.config, self.call, self.worst, self.rate_tokens)
        self.ticket = ticket
        reservation = ticket.held.reservation
        self._heartbeat = keep_alive(self.money.budgets, self.config, reservation)
        return ticket

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """The rate-limit headers admission answered with (none before it)."""
        return () if self.ticket is None else self.ticket.headers

    def run_cap(self, tier: str, pinned: str | None) -> int:
        """The ``max_tokens`` an engine request on ``tier`` runs with: what the
        reservation paid for, on the dearest model that tier's pool may pick."""
        assert self.ticket is not None, "open() first"
        return run_cap(self.config, tier, self.ticket.completion_cap, pinned)

    async def close(self, outcome: Concluded) -> None:
        """Stop the heartbeat and settle ``outcome`` (or record its refusal); the first
        call settles, later ones wait for that settlement. Never raises. Settlement is a
        task of its own: a request cancelled while closing still settles."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._settling is None:
            self._settling = settle_later(self.money, self.config, self.call, self.ticket, outcome)
        if self._settling is not None:
            await asyncio.shield(self._settling)


def refusal(exc: ApiError) -> tuple[str, str | None]:
    """What a refused admission is recorded as: the error, and what refused it
    (``rate_limit``, ``budget``; None: a store was down)."""
    if isinstance(exc, RateLimited):
        return exc.code or "rate_limited", "rate_limit"
    if isinstance(exc, InsufficientQuota):
        return exc.code or "insufficient_quota", "budget"
    return exc.code or "refused", None


async def reserve_best_tier(
    config: GatewayConfig,
    budgets: BudgetStore,
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
        result = await budgets.reserve(request_id, scopes, [w.usd for w in worst])
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
    limiter: RateLimiter, principal: Principal, request_id: str, tokens: int
) -> dict[str, str]:
    scopes = rate_scopes(principal)
    if not scopes:
        return {}
    try:
        decision = await limiter.acquire(request_id, scopes, tokens)
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


async def admit_worst(
    money: Money,
    config: GatewayConfig,
    call: Admitted,
    worst: Sequence[WorstCase],
    rate_tokens: int,
) -> Ticket:
    """Rate limits (``rate_tokens`` against tokens-per-minute), then one reservation for
    the first of ``worst`` that fits; the first one is what was asked for. Raises the
    refusal (``RateLimited``, ``InsufficientQuota``, ``ServiceUnavailable``)."""
    principal, request_id = call.principal, call.request_id
    headers = await _check_rate(money.limiter, principal, request_id, rate_tokens)
    held = await reserve_best_tier(config, money.budgets, principal, request_id, worst)
    if isinstance(held, Denied):
        if headers:  # admitted by the rate limit: a refused request used no tokens
            await correct_tokens(money.limiter, call, rate_tokens, 0)
        if held.scope == GLOBAL_SCOPE:  # the other tenants' spend is not this caller's business
            detail = "the gateway's overall budget is spent"
        else:
            detail = f"{held.scope}: ${max(held.remaining_usd, 0.0):.6f} left"
        if not held.final:  # requests in flight hold the room: it may come back
            detail += ", more once requests in flight settle"
            headers = {**headers, "Retry-After": HOLDS_RETRY_AFTER}
        else:  # the OpenAI SDKs retry every 429 unless told not to
            headers = {**headers, "x-should-retry": "false"}
        raise InsufficientQuota(
            f"You exceeded your current quota ({detail}; this request may cost up to "
            f"${held.needed_usd:.6f}).",
            headers=headers,
        )
    # Without reported usage the prompt is charged as the held tier's worst case.
    prompt_upper = held.worst.prompt_tokens
    return Ticket(held, worst[0].tier, prompt_upper, rate_tokens, tuple(headers.items()))


async def settle(
    money: Money, config: GatewayConfig, call: Admitted, ticket: Ticket, outcome: Concluded
) -> None:
    """Charge the outcome's cost against the reservation and append its ledger event."""
    metadata = bounded_metadata(call.metadata, config.ledger.metadata_bytes)
    event = outcome.ledger_event(call.request_id, call.principal, ticket.downgraded, metadata)
    reservation = ticket.held.reservation
    # What the store refuses now is journaled and settled once it is back, never lost.
    if reservation is None:  # failed open: no hold, but the counters still get the spend
        scopes = budget_scopes(config, call.principal)
        await money.journal.charge(call.request_id, scopes, outcome.cost_usd, event)
    else:
        await money.journal.settle(reservation, outcome.cost_usd, event)
    if ticket.headers:
        await correct_tokens(money.limiter, call, ticket.rate_tokens, outcome.rate_tokens)


async def correct_tokens(limiter: RateLimiter, call: Admitted, estimated: int, actual: int) -> None:
    """Count the request's real tokens against tokens-per-minute instead of its estimate."""
    scopes = [s for s in rate_scopes(call.principal) if s.spec.tokens_per_minute is not None]
    if not scopes:
        return
    try:
        await limiter.correct(call.request_id, scopes, estimated, actual)
    except StoreUnavailable as exc:
        log.warning("could not correct the token count of %s: %s", call.request_id, exc)


async def record_denied(
    ledger: Ledger, config: GatewayConfig, call: Admitted, outcome: Concluded
) -> None:
    """A refused request's ledger event (``kind="denied"``, the reason as its status)."""
    try:
        await ledger.record(
            outcome.denial_event(
                call.request_id,
                call.principal,
                bounded_metadata(call.metadata, config.ledger.metadata_bytes),
            )
        )
    except StoreUnavailable as exc:
        log.warning("could not record a denied request: %s", exc)


def settle_later(
    money: Money,
    config: GatewayConfig,
    call: Admitted,
    ticket: Ticket | None,
    outcome: Concluded,
) -> asyncio.Task[None] | None:
    """Settle ``ticket`` (or record the refusal in ``outcome.denied``) in a task of its own,
    held in ``money.background`` so that a request cancelled meanwhile still settles; None
    when there is nothing to settle. The task never raises."""
    if ticket is None and outcome.denied is None:
        return None
    task = asyncio.ensure_future(_settle_logged(money, config, call, ticket, outcome))
    money.background.add(task)
    task.add_done_callback(money.background.discard)
    return task


async def _settle_logged(
    money: Money, config: GatewayConfig, call: Admitted, ticket: Ticket | None, outcome: Concluded
) -> None:
    try:
        with timed("budget.settle"):
            if ticket is not None:
                await settle(money, config, call, ticket, outcome)
            else:
                await record_denied(money.ledger, config, call, outcome)
    except Exception:  # any failure: log it; it must never turn an answer into a 500
        log.exception("settling %s failed", call.request_id)
