"""What the lifespan builds, in one typed object: the app's container.

Requests never see it: they run on ``core`` (the config snapshot and the serving
collaborators, ``gateway.core.serving``), which the lifespan builds from these fields and each
policy reload rebuilds with the new config. App startup and the admin routes use the
rest (a test walks every function's parameters: ``tests/gateway/test_state_access.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from backends.pool import EnginePool, Replica
from gateway.admin.throttle import GuessThrottle
from gateway.cache.service import PromptCache
from gateway.core.serving import Readiness, ServingCore
from gateway.feedback.service import Feedback
from gateway.routing.objective import ObjectiveLambda
from gateway.routing.target_share import TargetShares
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.tracing import Tracing
from gateway.wire.responses_store import ResponseStore
from policies.audit import AuditLog
from policies.budget import BudgetStore
from policies.key_directory import KeyDirectory
from policies.ledger import Ledger
from policies.ratelimit import RateLimiter
from policies.schema import GatewayConfig
from policies.settle_journal import SettleJournal
from policies.store import Store
from policies.tenants import KeyRing
from routers.classifier import Classifier
from routers.embedding import Embedder
from routers.wordpiece import ServedEmbedder


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    keyring: KeyRing
    store: Store
    ledger: Ledger
    replicas: dict[str, list[Replica]]
    pools: dict[str, EnginePool]
    metrics: GatewayMetrics
    tracing: Tracing
    budgets: BudgetStore
    limiter: RateLimiter
    keys: KeyDirectory  # YAML keys and API-managed ones: ``await keys.authenticate(raw)``
    audit: AuditLog
    journal: SettleJournal  # settles the store refuses wait here (and on disk) until it is back
    responses: ResponseStore  # stored /v1/responses, per API key, in ``store``
    cache: PromptCache | None = None
    embedder: Embedder | None = None  # shared by the classifier and the semantic cache
    served_embedder: ServedEmbedder | None = None  # the classifier's, for /v1/embeddings
    readiness: Readiness = field(default_factory=Readiness)
    # Settlements run as their own tasks so a cancelled request still settles; the
    # lifespan waits for them before closing the store.
    background: set[asyncio.Task[None]] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    classifier: Classifier | None = None  # None: ``auto`` goes to the tenant's default tier
    config_source: Callable[[], GatewayConfig] | None = None  # re-read on policy reload
    shares: TargetShares | None = None  # ``routing.target_share``: thresholds from traffic
    objective: ObjectiveLambda | None = None  # ``routing.objective``: λ from traffic
    admin_guesses: GuessThrottle = field(default_factory=lambda: GuessThrottle(5, 50))
    # What requests run on: ``config`` and the collaborators above (``gateway.app``).
    core: ServingCore = field(init=False)
    feedback: Feedback | None = None  # ``routing.feedback``: shadows, verdicts, refits


def get_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.tiergate
    return state
