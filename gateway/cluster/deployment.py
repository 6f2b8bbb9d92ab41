"""What one gateway process shares with the rest of a deployment: engine nodes it finds
at run time, and policy reloads it publishes to (and takes from) the other fronts.

``join_cluster`` runs in the lifespan after the state is built and before the gateway
says it is ready; ``Cluster.aclose`` undoes it. A single process with no ``discover``
engines and no Redis gets an empty ``Cluster``: nothing runs, nothing changes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from backends.discovery import (
    Discovery,
    DnsEndpoints,
    EndpointSource,
    FileEndpoints,
    NodeSet,
    Pacing,
    StaticEndpoints,
)
from gateway.cluster.reload_bus import ReloadBus, config_version
from gateway.state import GatewayState
from policies.engine_spec import DiscoverySpec

log = logging.getLogger(__name__)

__all__ = ["Cluster", "config_version", "join_cluster"]


def source_of(spec: DiscoverySpec) -> EndpointSource:
    if spec.dns is not None:
        return DnsEndpoints(spec.dns, spec.port, spec.scheme, spec.path)
    if spec.static is not None:
        return StaticEndpoints(spec.static)
    assert spec.file is not None
    return FileEndpoints(Path(spec.file))


def discovery_of(state: GatewayState) -> Discovery:
    config = state.config
    node_sets = []
    for name, spec in config.engines.items():
        if spec.discover is None:
            continue
        pools = [state.parts.pools[t] for t, tier in config.tiers.items() if name in tier.engines]
        pacing = Pacing(
            spec.discover.refresh_s, spec.discover.load_interval_s, spec.discover.probe_timeout_s
        )
        node_sets.append(
            NodeSet(
                name,
                spec.model,
                spec.max_inflight,
                spec.options,
                source_of(spec.discover),
                pacing,
                state.parts.replicas[name],
                pools,
            )
        )
    return Discovery(node_sets)


class Cluster:
    def __init__(self, discovery: Discovery, bus: ReloadBus | None) -> None:
        self.discovery = discovery
        self.bus = bus

    async def aclose(self) -> None:
        if self.bus is not None:
            await self.bus.aclose()
        await self.discovery.aclose()


async def join_cluster(state: GatewayState) -> Cluster:
    discovery = discovery_of(state)
    await discovery.start()
    bus = None
    if state.config.redis_url is not None and state.config_source is not None:
        bus = ReloadBus(state, state.config.redis_url, state.config.redis_prefix)
        await bus.start()
    return Cluster(discovery, bus)
