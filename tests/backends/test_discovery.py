"""Endpoint sources and the node set, against real sockets: the system resolver, files,
and small HTTP servers on loopback that answer ``GET /v1/load`` as a node does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic import ValidationError

from backends.base import GenerationRequest, SamplingParams
from backends.discovery import (
    DiscoveryFailed,
    DnsEndpoints,
    FileEndpoints,
    NodeSet,
    Pacing,
    StaticEndpoints,
    node_label,
)
from backends.openai_compat import OpenAICompatEngine
from backends.pool import EnginePool, Replica
from policies.engine_spec import EngineSpec
from tiergate_testing.net import free_port

SSE = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)


class LoadServer:
    """Answers ``GET /v1/load`` with whatever ``body`` holds (or a status), and chat
    completions with a one-token stream, counting them."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.body: dict[str, Any] = {"running": 2, "waiting": 3, "kv_usage": 0.5, "healthy": True}
        self.status = 200
        self.served = 0
        self._runner: web.AppRunner | None = None

    async def _load(self, request: web.Request) -> web.Response:
        return web.json_response(self.body, status=self.status)

    async def _chat(self, request: web.Request) -> web.Response:
        self.served += 1
        return web.Response(body=SSE, content_type="text/event-stream")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/load", self._load)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class ListSource:
    """An endpoint source the test edits; ``fail`` makes the next resolution fail."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.fail = False

    async def resolve(self) -> list[str]:
        if self.fail:
            raise DiscoveryFailed("resolver down")
        return list(self.urls)


@pytest.fixture
async def servers() -> AsyncIterator[list[LoadServer]]:
    started = [LoadServer(), LoadServer()]
    for server in started:
        await server.start()
    yield started
    for server in started:
        await server.stop()


def node_set(source: ListSource) -> tuple[NodeSet, EnginePool, list[Replica]]:
    replicas: list[Replica] = []
    pool = EnginePool("small", [])
    nodes = NodeSet("small-nodes", "m", 7, {}, source, Pacing(), replicas, [pool])
    return nodes, pool, replicas


async def test_dns_source_gives_one_url_per_address() -> None:
    urls = await DnsEndpoints("localhost", 8123).resolve()
    assert "http://127.0.0.1:8123/v1" in urls
    assert all(u.endswith(":8123/v1") for u in urls)
    with pytest.raises(DiscoveryFailed):
        await DnsEndpoints("no-such-node.invalid", 8000).resolve()


async def test_file_and_static_sources(tmp_path: Path) -> None:
    path = tmp_path / "nodes.txt"
    path.write_text("# nodes\nhttp://10.0.0.2:8000/v1/\n\nhttp://10.0.0.1:8000/v1  # b\n")
    assert await FileEndpoints(path).resolve() == [
        "http://10.0.0.1:8000/v1",
        "http://10.0.0.2:8000/v1",
    ]
    with pytest.raises(DiscoveryFailed):
        await FileEndpoints(tmp_path / "missing.txt").resolve()
    assert await StaticEndpoints(("http://b/v1", "http://a/v1/", "http://b/v1")).resolve() == [
        "http://a/v1",
        "http://b/v1",
    ]
    assert node_label("http://10.1.2.3:8000/v1") == "10.1.2.3:8000"


async def test_nodes_join_leave_and_drain(servers: list[LoadServer]) -> None:
    source = ListSource([s.url for s in servers])
    nodes, pool, replicas = node_set(source)
    await nodes.refresh()
    assert len(pool.replicas) == len(replicas) == 2
    assert all(r.healthy() and r.max_inflight == 7 for r in pool.replicas)
    assert nodes.nodes() == {f"127.0.0.1:{s.port}": True for s in servers}
    leaving = next(r for r in pool.replicas if r.name.endswith(str(servers[1].port)))
    leaving.inflight = 1  # a stream still running on it
    source.urls = [servers[0].url]
    await nodes.refresh()
    assert leaving not in pool.replicas and leaving not in replicas
    engine = leaving.engine
    assert isinstance(engine, OpenAICompatEngine)
    assert engine.load().healthy  # not closed while its stream runs
    leaving.inflight = 0
    await nodes.refresh()
    assert not engine.load().healthy  # closed once drained
    await nodes.aclose()


async def test_the_pool_scores_nodes_by_their_reported_load(servers: list[LoadServer]) -> None:
    busy, idle = servers
    busy.body = {"running": 200, "waiting": 40, "kv_usage": 0.95, "healthy": True}
    idle.body = {"running": 1, "waiting": 0, "kv_usage": 0.05, "healthy": True}
    nodes, pool, _ = node_set(ListSource([busy.url, idle.url]))
    await nodes.refresh()
    for i in range(6):
        request = GenerationRequest(
            f"r{i}", "m", SamplingParams(), messages=({"role": "user", "content": f"q{i}"},)
        )
        chunks = [chunk async for chunk in pool.stream(request)]
        assert "".join(c.text for c in chunks) == "hi"
    assert (busy.served, idle.served) == (0, 6)
    await nodes.aclose()


async def test_a_failed_resolution_keeps_the_nodes(servers: list[LoadServer]) -> None:
    source = ListSource([s.url for s in servers])
    nodes, pool, _ = node_set(source)
    await nodes.refresh()
    source.fail = True
    await nodes.refresh()
    assert len(pool.replicas) == 2 and nodes.dropped == 0
    await nodes.aclose()


async def test_node_load_and_health_follow_its_answers(servers: list[LoadServer]) -> None:
    server = servers[0]
    nodes, pool, _ = node_set(ListSource([server.url]))
    await nodes.refresh()
    (replica,) = pool.replicas
    load = replica.engine.load()
    assert (load.running, load.waiting, load.kv_usage, load.healthy) == (2, 3, 0.5, True)
    server.body = {**server.body, "healthy": False}
    await nodes.probe()
    assert not replica.healthy()
    server.body = {**server.body, "healthy": True}
    server.status = 503
    await nodes.probe()
    assert not replica.healthy()
    server.status = 200
    await nodes.probe()
    assert replica.healthy()
    await server.stop()  # the node is gone
    await nodes.probe()
    assert not replica.healthy() and not pool.healthy()
    await server.start()  # and back
    await nodes.probe()
    assert replica.healthy()
    await nodes.aclose()


def test_discover_is_checked_when_the_file_loads() -> None:
    good = {"backend": "openai", "model": "m", "discover": {"dns": "tiergate-node-small"}}
    assert EngineSpec.model_validate(good).discover is not None
    bad = [
        {**good, "backend": "vllm"},
        {**good, "replicas": 2},
        {**good, "options": {"api_base": "http://x/v1"}},
        {**good, "discover": {"dns": "a", "file": "/b"}},
        {**good, "discover": {}},
        {**good, "discover": {"dns": "a", "path": "v1"}},
    ]
    for spec in bad:
        with pytest.raises(ValidationError):
            EngineSpec.model_validate(spec)
