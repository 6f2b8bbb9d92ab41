"""What the lifespan builds and the routes use, in one typed object."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from backends.pool import EnginePool, Replica
from gateway.metrics import GatewayMetrics
from gateway.tracing import Tracing
from policies.ledger import Ledger
from policies.schema import GatewayConfig
from policies.store import Store
from policies.tenants import KeyRing


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
    ready: bool = False


def get_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.tiergate
    return state
