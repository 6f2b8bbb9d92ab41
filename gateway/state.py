"""What the lifespan builds, in one typed object: the app's container.

Every collaborator a request uses is held once, in ``core`` (the config snapshot and
the serving collaborators, ``gateway.core.serving_core``); each policy reload replaces the
core with one over the same collaborators and the new snapshot. The rest is what only
startup and the admin side use: key resolution, the audit log, tracing, the startup
notes, the admin-key throttle. Requests never see the state (a test walks every
function's parameters: ``tests/gateway/test_state_access.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from gateway.core.serving_core import Collaborators, ServingCore
from gateway.telemetry.tracing import Tracing
from gateway.throttle import GuessThrottle
from policies.schema import GatewayConfig
from policies.stores.audit import AuditLog
from policies.stores.key_directory import KeyDirectory
from policies.tenants import KeyRing


@dataclass(slots=True)
class GatewayState:
    core: ServingCore  # the config snapshot requests take, and every collaborator
    keyring: KeyRing
    keys: KeyDirectory  # YAML keys and API-managed ones: ``await keys.authenticate(raw)``
    audit: AuditLog
    tracing: Tracing
    notes: list[str] = field(default_factory=list)
    config_source: Callable[[], GatewayConfig] | None = None  # re-read on policy reload
    admin_guesses: GuessThrottle = field(default_factory=lambda: GuessThrottle(5, 50))
    # Told each new policy once it runs (what lives beside the core: the MCP upstreams).
    on_reload: list[Callable[[GatewayConfig], None]] = field(default_factory=list)

    @property
    def config(self) -> GatewayConfig:
        """The running policy: the snapshot the next request takes."""
        return self.core.config

    @property
    def parts(self) -> Collaborators:
        return self.core.parts


def get_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.tiergate
    return state
