"""What routing uses, built once at startup (``Router``), and the per-tier model one
request routes by. The core's ``route()`` (``gateway/core/route.py``) and
``session_route`` both read it; neither imports the other for it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backends.pool import Replica
from policies.schema import GatewayConfig
from routers.classifier import Classifier
from routers.embedding import Embedder
from routers.live_sessions import Sessions
from routers.objective_lambda import ObjectiveLambda
from routers.target_share import TargetShares
from routers.tier_quality import QualitySource, ServedQuality


@dataclass(frozen=True, slots=True)
class Router:
    """What routing uses, built once at startup."""

    classifier: Classifier | None  # None: ``auto`` goes to the tenant's default tier
    embedder: Embedder | None  # shared by the classifier and the semantic cache
    shares: TargetShares | None  # ``routing.target_share``: thresholds from traffic
    replicas: Mapping[str, Sequence[Replica]]  # what each tier's engines honour
    background: set[asyncio.Task[None]]  # the share sketch's sync tasks
    objective: ObjectiveLambda | None = None  # ``routing.objective``: λ from traffic
    quality: QualitySource | None = None  # ``routing.feedback``: the serving refit
    sessions: Sessions | None = None  # ``routing.sessions``: an agent's turns as one session


def served_quality(config: GatewayConfig, router: Router) -> ServedQuality | None:
    """The per-tier model this request routes by: the feedback loop's serving one when the
    loop is on (None: the classifier's own). Read once per request."""
    if config.routing.feedback is None or router.quality is None:
        return None
    return router.quality.served()
