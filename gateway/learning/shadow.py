"""One shadow pair: the served answer, a second answer from another tier, and
the judge's verdicts, stored as labels: one of the cheaper tier, and one of the more
capable tier when the judge gave a verdict on its answer too (so the largest tier, every
pair's reference when it is in one, is labelled as well).

It runs as a background task after the client has its answer, inside the sampler's
concurrency bound, and never raises: every way it can fail ends in "no label".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from gateway.learning.judges import Judge, JudgeCase
from gateway.learning.operator_calls import Answer, OperatorDesk, operator_call
from gateway.learning.records import RoutedView, routing_inputs
from gateway.learning.sampler import shadow_tier
from gateway.types import Outcome
from policies.feedback_spec import FeedbackConfig
from policies.stores.feedback import FeedbackStore, Label
from policies.stores.store import StoreUnavailable
from routers.features import prompt_messages

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ShadowCounters:
    run: int = 0  # shadow answers started
    refused: int = 0  # the operator budget (or its store) refused one
    failed: int = 0  # the shadow or the judge gave no usable answer
    labelled: int = 0


def judgeable(outcome: Outcome, text: str) -> bool:
    """A served answer worth a shadow: a live answer that finished, with text."""
    return (
        outcome.status == "ok"
        and outcome.cache in ("miss", "bypass")
        and outcome.finish_reason in ("stop", "length")
        and bool(text.strip())
    )


async def judge_pair(
    desk: OperatorDesk,
    store: FeedbackStore,
    judge: Judge,
    counters: ShadowCounters,
    view: RoutedView,
    outcome: Outcome,
    served_text: str,
) -> Label | None:
    config = view.config
    spec: FeedbackConfig | None = config.routing.feedback
    if spec is None or outcome.tier not in config.tiers:
        return None
    tiers = list(config.tiers)
    ask = view.ask
    other = shadow_tier(tiers, outcome.tier, ask.request_id)
    generation = ask.generation
    cap = min(generation.sampling.max_tokens or spec.max_tokens, spec.max_tokens)
    shadow_request = replace(
        generation,
        request_id=f"{ask.request_id}-shadow",
        model=other,
        sampling=replace(generation.sampling, max_tokens=cap),
        whole=True,
    )
    counters.run += 1
    shadow = await operator_call(desk, config, other, shadow_request, "shadow")
    if shadow is None:
        counters.refused += 1
        return None
    served = Answer(outcome.tier, outcome.model, served_text, outcome.cost_usd, True)
    if not shadow.finished or not shadow.text.strip():
        counters.failed += 1
        return None
    cheaper, reference = sorted((served, shadow), key=lambda a: tiers.index(a.tier))
    messages = generation.messages or tuple(prompt_messages(generation.prompt or ""))
    verdict = await judge.judge(JudgeCase(ask.request_id, messages, cheaper, reference, config))
    if verdict is None:
        counters.failed += 1
        return None
    vector, features = routing_inputs(view)
    try:
        now = await store.now()
        label = Label(
            request_id=ask.request_id,
            tier=cheaper.tier,
            acceptable=verdict.acceptable,
            source="judge",
            vector=vector,
            features=features,
            ts=now,
            tenant=ask.principal.tenant,
            reference_tier=reference.tier,
            cost_usd=cheaper.cost_usd,
            reference_cost_usd=reference.cost_usd,
        )
        await store.add_label(label, spec.max_labels, spec.label_ttl_days * 86_400)
        if verdict.reference_acceptable is not None:  # its own label: not a pair
            other_label = replace(
                label,
                tier=reference.tier,
                acceptable=verdict.reference_acceptable,
                reference_tier=None,
                cost_usd=reference.cost_usd,
                reference_cost_usd=0.0,
            )
            await store.add_label(other_label, spec.max_labels, spec.label_ttl_days * 86_400)
    except StoreUnavailable as exc:
        log.warning("a judge's label of %s was lost: %s", ask.request_id, exc)
        counters.failed += 1
        return None
    counters.labelled += 1
    return label
