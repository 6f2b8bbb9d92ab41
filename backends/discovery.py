"""Engine nodes found at run time: one ``openai`` replica per node, added and dropped live.

A front reaches a tier's engine nodes through one YAML engine with ``discover``. Its
``NodeSet`` resolves the endpoint source every ``refresh_s`` (a headless Service's DNS
records, a fixed list, or a file of base URLs), builds an ``OpenAICompatEngine`` per new
node and adds it to every pool that names the engine; a node gone from the source leaves
the pools at once and its engine is closed when its last stream ends. Every
``load_interval_s`` each node's engine load is read from ``<base>/load``; a node that does
not answer is unhealthy, so the pool routes around it (and retries its unstarted
requests elsewhere) until it answers again. A failed resolution keeps the nodes known:
a DNS blip must not empty a tier.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from backends.openai_compat import OpenAICompatEngine
from backends.pool import EnginePool, Replica

log = logging.getLogger(__name__)


class DiscoveryFailed(Exception):
    """The endpoint source could not be read this time."""


class EndpointSource(Protocol):
    async def resolve(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class StaticEndpoints:
    urls: tuple[str, ...]

    async def resolve(self) -> list[str]:
        return sorted({url.rstrip("/") for url in self.urls})


@dataclass(frozen=True, slots=True)
class FileEndpoints:
    """One base URL a line, re-read on every refresh (a mounted ConfigMap, a test)."""

    path: Path

    async def resolve(self) -> list[str]:
        try:
            text = await asyncio.to_thread(self.path.read_text)
        except OSError as exc:
            raise DiscoveryFailed(f"cannot read {self.path}: {exc}") from exc
        lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
        return sorted({line.rstrip("/") for line in lines if line})


@dataclass(frozen=True, slots=True)
class DnsEndpoints:
    """Every A/AAAA record of ``host``: a headless Service has one per ready pod."""

    host: str
    port: int
    scheme: str = "http"
    path: str = "/v1"

    async def resolve(self) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            records = await loop.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        except (socket.gaierror, UnicodeError) as exc:
            raise DiscoveryFailed(f"cannot resolve {self.host}: {exc}") from exc
        addresses = {str(sockaddr[0]) for *_, sockaddr in records}
        return sorted(self._url(address) for address in addresses)

    def _url(self, address: str) -> str:
        host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
        return f"{self.scheme}://{host}:{self.port}{self.path}"


@dataclass(frozen=True, slots=True)
class Pacing:
    refresh_s: float = 5.0
    load_interval_s: float = 0.5
    probe_timeout_s: float = 1.0


def node_label(url: str) -> str:
    """``http://10.1.2.3:8000/v1`` → ``10.1.2.3:8000``: the part that names a node."""
    return url.split("://", 1)[-1].split("/", 1)[0]


class NodeSet:
    """The nodes of one YAML engine, kept in step with its endpoint source."""

    def __init__(
        self,
        name: str,
        model: str,
        max_inflight: int,
        options: Mapping[str, Any],
        source: EndpointSource,
        pacing: Pacing,
        replicas: list[Replica],
        pools: Sequence[EnginePool],
    ) -> None:
        self.name = name
        self.model = model
        self.source = source
        self.pacing = pacing
        self.replicas = replicas  # the gateway's list for this engine, kept current
        self.pools = tuple(pools)
        self.max_inflight = max_inflight
        self._options = dict(options)  # checked against OpenAIOptions by the engine spec
        self._by_url: dict[str, Replica] = {}
        self._draining: list[Replica] = []
        self.added = 0
        self.dropped = 0

    def _build(self, url: str) -> OpenAICompatEngine:
        return OpenAICompatEngine(
            name=f"{self.name}@{node_label(url)}",
            model=self.model,
            api_base=url,
            probe_load=True,
            probe_timeout_s=self.pacing.probe_timeout_s,
            **self._options,
        )

    def nodes(self) -> dict[str, bool]:
        """Node → healthy, for ``/readyz``."""
        return {node_label(url): r.healthy() for url, r in sorted(self._by_url.items())}

    async def refresh(self) -> None:
        try:
            urls = set(await self.source.resolve())
        except DiscoveryFailed as exc:
            known = len(self._by_url)
            log.warning("engine %s: discovery failed, keeping %d nodes: %s", self.name, known, exc)
            urls = set(self._by_url)
        for url in sorted(urls - set(self._by_url)):
            await self._join(url)
        for url in sorted(set(self._by_url) - urls):
            self._leave(url)
        await self._close_drained()

    async def _join(self, url: str) -> None:
        engine = self._build(url)
        await engine.start()
        await engine.probe()  # a node is picked only once its load has been read
        replica = Replica(engine, self.max_inflight, builder=None)
        self._by_url[url] = replica
        self.replicas.append(replica)
        for pool in self.pools:
            pool.add(replica)
        self.added += 1
        log.info("engine %s: node %s joined (healthy: %s)", self.name, url, replica.healthy())

    def _leave(self, url: str) -> None:
        replica = self._by_url.pop(url)
        for pool in self.pools:
            pool.remove(replica)
        self.replicas.remove(replica)
        self._draining.append(replica)
        self.dropped += 1
        log.info("engine %s: node %s left (%d in flight)", self.name, url, replica.inflight)

    async def _close_drained(self) -> None:
        done = [r for r in self._draining if r.inflight == 0]
        self._draining = [r for r in self._draining if r.inflight > 0]
        await asyncio.gather(*(r.engine.aclose() for r in done))

    async def probe(self) -> None:
        engines = [r.engine for r in self._by_url.values()]
        await asyncio.gather(*(e.probe() for e in engines if isinstance(e, OpenAICompatEngine)))

    async def run(self) -> None:
        """Probe every ``load_interval_s``, re-resolve every ``refresh_s``; until cancelled."""
        loop = asyncio.get_running_loop()
        next_refresh = loop.time() + self.pacing.refresh_s
        while True:
            await asyncio.sleep(self.pacing.load_interval_s)
            if loop.time() >= next_refresh:
                next_refresh = loop.time() + self.pacing.refresh_s
                await self.refresh()
            await self.probe()

    async def aclose(self) -> None:
        engines = [r.engine for r in (*self._by_url.values(), *self._draining)]
        self._by_url.clear()
        self._draining.clear()
        await asyncio.gather(*(e.aclose() for e in engines))


class Discovery:
    """Every discovering engine of one gateway, with its background loop."""

    def __init__(self, node_sets: Sequence[NodeSet]) -> None:
        self.node_sets = tuple(node_sets)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Find the nodes once (so a front starts ready), then keep them current."""
        await asyncio.gather(*(n.refresh() for n in self.node_sets))
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(n.run(), name=f"discover-{n.name}") for n in self.node_sets]
        for task in self._tasks:
            task.add_done_callback(_log_crash)

    def nodes(self) -> dict[str, dict[str, bool]]:
        return {n.name: n.nodes() for n in self.node_sets}

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(n.aclose() for n in self.node_sets))


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped: %r", task.get_name(), task.exception())
