"""Reload policies (tenants, keys, prices, routing thresholds) without a restart.

The file is read and validated in full before anything changes; then the new config, key
ring and serving core (the same collaborators over the new snapshot:
``ServingCore.reconfigured``) replace the old ones in one step on the event loop. A
request takes its core with its key lookup (``gateway.edge.http.tenant_call``) and carries it
to the end, so it runs wholly on the old policy or wholly on the new one, never a mix.
What needs a restart (engines, tiers, the classifier) must stay the same, or the file is
refused and the running policy kept.
Triggers: SIGHUP, and ``POST /admin/api/policies/reload`` (``gateway.admin.policies``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from gateway.state import GatewayState
from policies.feedback_spec import JudgeSpec
from policies.loader import ConfigError
from policies.schema import GatewayConfig
from policies.tenants import KeyRing

log = logging.getLogger(__name__)


class PolicyRejected(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Reloaded:
    tenants: int
    thresholds: tuple[float, float]


def _stands_for(config: GatewayConfig) -> dict[str, str]:
    objective = config.routing.objective
    return {} if objective is None else dict(objective.reference)


def _judge(config: GatewayConfig) -> JudgeSpec | None:
    return None if config.routing.feedback is None else config.routing.feedback.judge


def _needs_restart(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    fixed = {
        "engines": (old.engines, new.engines),
        "tiers": (old.tiers, new.tiers),
        "routing.classifier": (old.routing.classifier, new.routing.classifier),
        # which quality head each tier stands for is fixed when the model is loaded
        "routing.objective.reference": (_stands_for(old), _stands_for(new)),
        # built at startup: the feedback loop (on or off) and its judge
        "routing.feedback.judge": (_judge(old), _judge(new)),
        "server": (old.server, new.server),
        "redis_url": (old.redis_url, new.redis_url),
        "redis_cluster": (old.redis_cluster, new.redis_cluster),
        "redis_prefix": (old.redis_prefix, new.redis_prefix),
        "mcp.sessions": (old.mcp.sessions, new.mcp.sessions),  # the SDK's session manager
    }
    return [f"{name}: changing it needs a restart" for name, (a, b) in fixed.items() if a != b]


def _prepare(state: GatewayState) -> tuple[GatewayConfig, KeyRing]:
    """Read, validate and build everything; touches nothing of the running state."""
    if state.config_source is None:
        raise PolicyRejected(["the gateway was not started from a config file"])
    try:
        config = state.config_source()
    except ConfigError as exc:
        raise PolicyRejected([str(p) for p in exc.problems]) from exc
    problems = _needs_restart(state.config, config)
    if problems:
        raise PolicyRejected(problems)
    return config, KeyRing.from_config(config)


async def reload_policies(state: GatewayState) -> Reloaded:
    config, keyring = await asyncio.to_thread(_prepare, state)
    if state.parts.router.objective is not None:  # the new snapshot's λ prior, off the loop
        await state.parts.router.objective.prepare(config)
    # No await between these lines: no request can see half of the change. A request
    # holds the core it took with its key; the new core serves the ones that follow.
    state.core, state.keyring = state.core.reconfigured(config), keyring
    state.keys.reconfigure(config, keyring)
    for listener in state.on_reload:
        listener(config)
    log.info("policies reloaded: %d tenants", len(config.tenants))
    return Reloaded(len(config.tenants), config.routing.thresholds)


async def _reload_logged(state: GatewayState) -> None:
    try:
        await reload_policies(state)
    except PolicyRejected as exc:
        log.error("policy reload refused, the running policy stays: %s", exc)


def install_sighup(state: GatewayState, tasks: set[asyncio.Task[None]]) -> bool:
    """SIGHUP reloads; only possible from the main thread (False elsewhere, e.g. tests)."""
    loop = asyncio.get_running_loop()

    def on_hup() -> None:
        task = loop.create_task(_reload_logged(state))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    except (RuntimeError, ValueError, NotImplementedError, AttributeError):
        return False
    return True


def remove_sighup() -> None:
    try:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
    except (RuntimeError, ValueError, NotImplementedError, AttributeError):
        return
