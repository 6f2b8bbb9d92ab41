"""One engine call the operator pays for (a shadow answer, a judge's verdict): reserved
on scope ``operator:feedback`` and the global cap, never on a tenant's; run on a tier's
pool off the response path; settled with what it really cost, its ledger event under
the pseudo-tenant ``(feedback)`` (a name no tenant can have).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from backends.base import GenerationRequest, Usage
from backends.errors import EngineError
from backends.pool import EnginePool, StreamInfo
from gateway.money.spend import model_cost, run_cap, worst_cases
from policies.feedback_spec import OPERATOR_SCOPE
from policies.schema import BudgetSpec, GatewayConfig
from policies.stores.budget import GLOBAL_SCOPE, BudgetStore, Denied, Scope
from policies.stores.ledger import SpendEvent, now
from policies.stores.settle_journal import SettleJournal
from policies.stores.store import StoreUnavailable

log = logging.getLogger(__name__)

FEEDBACK_TENANT = "(feedback)"  # outside the tenant name pattern: never a real tenant


@dataclass(frozen=True, slots=True)
class OperatorDesk:
    """What an operator call needs of the gateway: the pools, the budget, the journal."""

    pools: Mapping[str, EnginePool]
    budgets: BudgetStore
    journal: SettleJournal


@dataclass(frozen=True, slots=True)
class Answer:
    tier: str
    model: str
    text: str
    cost_usd: float
    finished: bool  # the engine ended it itself (stop / length), not an error


def operator_scopes(config: GatewayConfig) -> list[Scope]:
    spec = config.routing.feedback
    budget = spec.budget if spec is not None else None
    limit = (
        None
        if budget is None or budget.limit_usd is None
        else BudgetSpec(limit_usd=budget.limit_usd, window=budget.window)
    )
    return [Scope(GLOBAL_SCOPE, config.budgets.global_budget), Scope(OPERATOR_SCOPE, limit)]


async def operator_call(
    desk: OperatorDesk,
    config: GatewayConfig,
    tier: str,
    generation: GenerationRequest,
    purpose: str,
    pinned: str | None = None,
) -> Answer | None:
    """Run ``generation`` on ``tier`` at the operator's expense; None when the operator
    budget refuses it, its store is down, or the engine fails (each logged)."""
    cap = run_cap(config, tier, generation.sampling.max_tokens or 1, pinned)
    generation = replace(generation, sampling=replace(generation.sampling, max_tokens=cap))
    worst = worst_cases(config, [tier], generation, pinned)[0]
    try:
        held = await desk.budgets.reserve(
            generation.request_id, operator_scopes(config), [worst.usd]
        )
    except StoreUnavailable as exc:
        log.warning("feedback %s skipped: the budget store is unreachable: %s", purpose, exc)
        return None
    if isinstance(held, Denied):
        log.info("feedback %s skipped: %s has $%.6f left", purpose, held.scope, held.remaining_usd)
        return None
    info, parts, usage, finish = StreamInfo(), [], None, None
    started = time.perf_counter()
    try:
        async for chunk in desk.pools[tier].stream(generation, info):
            parts.append(chunk.text)
            usage, finish = chunk.usage or usage, chunk.finish_reason or finish
    except EngineError as exc:
        log.info("feedback %s on %s failed: %s", purpose, tier, exc)
    model = info.model or pinned or tier
    streamed = sum(1 for p in parts if p)
    charged = usage or Usage(worst.prompt_tokens if info.attempts else 0, min(streamed, cap))
    cost = model_cost(config, model, charged)
    event = SpendEvent(
        ts=now(),
        request_id=generation.request_id,
        tenant=FEEDBACK_TENANT,
        key_id=purpose,
        tier=tier,
        model=model,
        status="ok" if finish is not None else "error",
        prompt_tokens=charged.prompt_tokens,
        cached_tokens=charged.cached_tokens,
        completion_tokens=charged.completion_tokens,
        cost_usd=cost,
        latency_ms=(time.perf_counter() - started) * 1000,
    )
    await desk.journal.settle(held, cost, event)
    return Answer(tier, model, "".join(parts), cost, finish in ("stop", "length"))
