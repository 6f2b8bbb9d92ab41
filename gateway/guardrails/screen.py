"""The guard stage at the start of the serving core: one call for every family.

``screen(ask)`` redacts the request's messages (or prompt), its pass-through fields and
its metadata by the caller's policy before the cache, routing, the money, the ledger,
traces or an engine see them; a ``block`` rule ends it with a 400 and nothing charged or
kept. It gives the redacted ``Ask`` and the request's ``RequestGuard`` (None where the
caller has no ``guardrails:`` block: then nothing here runs past one dict lookup).
``keep_local`` then moves a ``local`` request to a tier whose engines run in this
process, or refuses it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from gateway.errors import ApiError
from gateway.guardrails.errors import NoLocalTier
from gateway.guardrails.guard import RequestGuard, in_process
from gateway.guardrails.policy import policy_for
from gateway.guardrails.redactor import Redactor
from gateway.telemetry.metrics import GatewayMetrics
from gateway.types import Ask, RoutedRequest
from policies.schema import GatewayConfig


def screen(
    ask: Ask, config: GatewayConfig, metrics: GatewayMetrics | None = None
) -> tuple[Ask, RequestGuard | None]:
    """The request as its policy leaves it, and its guard (None: no ``guardrails:``).
    What it found is counted (by type and action, never a value) however it ends."""
    policy = policy_for(ask.principal)
    if policy is None:
        return ask, None
    started = time.perf_counter()
    redactor = Redactor(policy)
    try:
        screened = _screened(ask, redactor)
    except ApiError:
        raise  # a block rule: the 400 names it
    except Exception as exc:  # any detector's failure is the guard's: fail closed or open
        redactor.detector_failed(exc, "this request", "it was not sent")
        screened = ask
    finally:
        seconds = time.perf_counter() - started
        if metrics is not None:
            metrics.guarded(ask.principal.tenant, redactor.counts, "request", seconds)
        redactor.counts.clear()
    tenant = ask.principal.tenant
    return screened, RequestGuard(redactor, config, seconds, metrics, tenant)


async def screen_off_loop(
    ask: Ask, config: GatewayConfig, metrics: GatewayMetrics | None = None
) -> tuple[Ask, RequestGuard | None]:
    """``screen``, in a worker thread where the policy runs Presidio (milliseconds of
    CPU a prompt, and the pipeline's load on first use): never on the event loop."""
    policy = policy_for(ask.principal)
    if policy is not None and policy.ner:
        return await asyncio.to_thread(screen, ask, config, metrics)
    return screen(ask, config, metrics)


def _screened(ask: Ask, redactor: Redactor) -> Ask:
    generation = ask.generation
    messages, prompt, passthrough = generation.messages, generation.prompt, generation.passthrough
    if messages is not None:
        messages = redactor.walk(messages, "messages")
    if prompt is not None:
        prompt = redactor.walk(prompt, "prompt")
    if passthrough:
        passthrough = redactor.walk(passthrough)
    metadata = redactor.walk(ask.metadata, "metadata") if ask.metadata else ask.metadata
    changed = replace(generation, messages=messages, prompt=prompt, passthrough=passthrough)
    return replace(ask, generation=changed, metadata=metadata)


def keep_local(routed: RoutedRequest, guard: RequestGuard) -> RoutedRequest:
    """A ``local`` request on an in-process tier: ``auto``'s choice is moved to the
    nearest one the tenant may use; a tier the client forced or a model it named that
    is remote is refused (400 guardrail_no_local_tier)."""
    config, tier, ask = routed.config, routed.decision.tier, routed.ask
    if not guard.local or in_process(config, tier):
        return routed
    if ask.forced_tier is not None or ask.requested_model != "auto":
        raise NoLocalTier(
            f"guardrail: this request holds a value that must stay local, and tier {tier!r} "
            "(the one asked for) runs on a remote provider",
            param="model",
        )
    allowed = ask.principal.policy.allowed_tiers
    order = list(config.tiers)
    local = [t for t in order if in_process(config, t) and (allowed is None or t in allowed)]
    if not local:
        raise NoLocalTier(
            "guardrail: this request holds a value that must stay local, and no tier this "
            "key may use runs in process",
            param="model",
        )
    here = order.index(tier)
    nearest = min(local, key=lambda t: (abs(order.index(t) - here), order.index(t)))
    decision = routed.decision.moved(nearest, f"guardrail: local only, {tier} -> {nearest}")
    return replace(routed, decision=decision)
