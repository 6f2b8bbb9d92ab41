"""Build the feedback loop the config asks for (in the lifespan), or None."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping

from backends.pool import EnginePool
from gateway.learning.judges import JudgeUnavailable, build_judge
from gateway.learning.operator_calls import OperatorDesk
from gateway.learning.service import Feedback
from policies.schema import GatewayConfig
from policies.stores.budget import BudgetStore
from policies.stores.factories import open_feedback_store
from policies.stores.settle_journal import SettleJournal
from policies.stores.store import Store
from routers.classifier import Classifier, ComplexityClassifier
from routers.tier_quality import ComplexityQuality, TierQuality

log = logging.getLogger(__name__)


def replica_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def base_quality(config: GatewayConfig, classifier: Classifier | None) -> TierQuality | None:
    """The model a refit layers over: the per-tier quality model routing reads (its
    ``TierView``), else the complexity model read per tier."""
    if isinstance(classifier, ComplexityClassifier):
        if classifier.quality is not None:
            return classifier.quality
        return ComplexityQuality(classifier.model, list(config.tiers))
    return None


async def open_feedback(
    config: GatewayConfig,
    store: Store,
    pools: Mapping[str, EnginePool],
    budgets: BudgetStore,
    journal: SettleJournal,
    classifier: Classifier | None,
    notes: list[str],
) -> Feedback | None:
    spec = config.routing.feedback
    if spec is None:
        return None
    desk = OperatorDesk(pools, budgets, journal)
    try:
        judge = await asyncio.to_thread(build_judge, spec.judge, desk)
    except JudgeUnavailable as exc:
        note = f"routing.feedback is off: {exc}"
        log.error("%s", note)
        notes.append(note)
        return None
    base = base_quality(config, classifier)
    if base is None:
        notes.append("routing.feedback: no classifier loaded, labels are gathered but not refitted")
    return Feedback(open_feedback_store(store), judge, desk, base, replica_name())
