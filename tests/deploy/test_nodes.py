"""1 front + engine-node processes for one tier + Redis, all real, on loopback.

The nodes are ``python -m gateway serve`` processes on the protocol fake; the front runs
in this process (real uvicorn) and finds them through a file of base URLs that it
re-reads every 0.25 s. Module-scoped: the tests run in order on the same nodes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from backends.pool import Replica
from tests.redis_servers import REDIS7_URL, delete_prefix
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.nodes import NODE_KEY, NodeProcess, front_config, write_endpoints

PACE = {"tokens": 8, "first_token_delay_s": 0.05, "token_delay_s": 0.05}


class Deployment:
    def __init__(self, workdir: Path, front: RunningGateway, nodes: list[NodeProcess]) -> None:
        self.workdir = workdir
        self.front = front
        self.nodes = nodes
        self.endpoints = workdir / "small-nodes.txt"

    def replicas(self) -> dict[str, Replica]:
        """Node port → its replica in the front's pool."""
        pool = self.front.state.parts.pools["small"]
        return {r.name.rsplit(":", 1)[1]: r for r in pool.replicas}

    def served(self) -> dict[str, int]:
        return {port: r.engine.counters.started for port, r in self.replicas().items()}

    def readyz(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(self.front.base_url + "/readyz", timeout=5).json()
        return body

    def wait_for(self, condition: Any, timeout_s: float = 15.0) -> float:
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > timeout_s:
                raise TimeoutError("condition not met")
            time.sleep(0.02)
        return time.monotonic() - started


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("nodes")
    os.environ["TIERGATE_NODE_KEY"] = NODE_KEY
    nodes = [NodeProcess(workdir, f"node{i}", **PACE) for i in range(2)]
    for node in nodes:
        node.spawn()
    prefix = f"tg-nodes-{os.getpid()}"
    try:
        for node in nodes:
            node.wait_ready()
        endpoints = workdir / "small-nodes.txt"
        write_endpoints(endpoints, nodes)
        with running_gateway(front_config(endpoints, REDIS7_URL, prefix)) as front:
            yield Deployment(workdir, front, nodes)
    finally:
        for node in nodes:
            node.stop()
        delete_prefix(REDIS7_URL, prefix)


async def one_stream(client: openai.AsyncOpenAI, content: str) -> tuple[int, str | None]:
    """(tokens received, error or None) for one streamed chat completion."""
    tokens = 0
    try:
        stream = await client.chat.completions.create(
            model="small", stream=True, messages=[{"role": "user", "content": content}]
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                tokens += 1
    except openai.APIError as exc:
        return tokens, repr(exc)
    return tokens, None


def client_for(front: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=front.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def run_streams(front: RunningGateway, prompts: list[str]) -> list[tuple[int, str | None]]:
    async def main() -> list[tuple[int, str | None]]:
        async with client_for(front) as client:
            return await asyncio.gather(*(one_stream(client, p) for p in prompts))

    return asyncio.run(main())


def test_requests_balance_across_nodes(deployment: Deployment) -> None:
    assert deployment.readyz()["nodes"]["small-nodes"] == {
        f"127.0.0.1:{n.port}": True for n in deployment.nodes
    }
    node_load = deployment.nodes[0].api_url + "/load"
    assert httpx.get(node_load).status_code == 401  # the node's API key guards it
    load = httpx.get(node_load, headers={"authorization": f"Bearer {NODE_KEY}"}).json()
    assert load["healthy"] is True and load["tiers"]["small"]["replicas"] == 1
    assert {"running", "waiting", "kv_usage", "inflight", "max_inflight"} <= set(load)
    before = deployment.served()
    results = run_streams(deployment.front, [f"question {i}" for i in range(40)])
    assert all(error is None and tokens == 8 for tokens, error in results), results
    after = deployment.served()
    per_node = [after[port] - before[port] for port in after]
    assert sum(per_node) == 40
    assert min(per_node) >= 12, per_node  # both nodes carry a fair share


def test_conversations_stick_to_a_node_by_prefix(deployment: Deployment) -> None:
    landed: dict[int, set[str]] = {}

    async def main() -> None:
        async with client_for(deployment.front) as client:
            for conversation in range(6):
                system = f"conversation {conversation}: " + "you are a careful assistant. " * 40
                messages: list[Any] = [{"role": "system", "content": system}]
                for turn in range(5):  # odd: first turns alternate round-robin
                    messages.append({"role": "user", "content": f"turn {turn}"})
                    before = deployment.served()
                    answer = await client.chat.completions.create(model="small", messages=messages)
                    after = deployment.served()
                    landed.setdefault(conversation, set()).update(
                        port for port in after if after[port] != before[port]
                    )
                    messages.append(
                        {"role": "assistant", "content": answer.choices[0].message.content}
                    )

    asyncio.run(main())
    assert all(len(ports) == 1 for ports in landed.values()), landed
    assert len(set().union(*landed.values())) == 2  # and the conversations use both nodes


def test_killed_node_fails_no_request_before_its_first_token(deployment: Deployment) -> None:
    victim = deployment.nodes[1]
    victim_port = str(victim.port)
    results: list[tuple[int, str | None]] = []
    failover: dict[str, float] = {}

    async def main() -> None:
        async with client_for(deployment.front) as client:
            load = asyncio.gather(*(one_stream(client, f"load {i}") for i in range(60)))
            replica = deployment.replicas()[victim_port]
            waited = time.monotonic()
            while replica.inflight < 5:  # streams are running on the victim
                assert time.monotonic() - waited < 10, "the load never reached the victim"
                await asyncio.sleep(0.005)
            failover["inflight"] = replica.inflight
            killed = time.monotonic()
            await asyncio.to_thread(victim.kill)
            while replica.healthy():  # polled: the front learns it from a broken connection
                assert time.monotonic() - killed < 10, "the dead node stays in rotation"
                await asyncio.sleep(0.001)
            failover["out_s"] = time.monotonic() - killed
            results.extend(await load)

    asyncio.run(main())
    before_first_token = [r for r in results if r[1] is not None and r[0] == 0]
    assert before_first_token == [], before_first_token
    assert sum(error is None for _, error in results) >= 30
    assert failover["out_s"] < 2.0, failover
    assert deployment.readyz()["nodes"]["small-nodes"][f"127.0.0.1:{victim_port}"] is False
    before = deployment.served()
    after_kill = run_streams(deployment.front, [f"after {i}" for i in range(10)])
    assert all(error is None for _, error in after_kill), after_kill
    assert deployment.served()[victim_port] == before[victim_port]  # nothing sent there
    print(
        f"failover: node out of rotation {failover['out_s'] * 1000:.1f} ms after SIGKILL, "
        f"{failover['inflight']:.0f} in flight on it, "
        f"{sum(e is not None for _, e in results)} of 60 cut after their first token"
    )


def test_node_added_at_run_time_takes_traffic(deployment: Deployment) -> None:
    survivor = deployment.nodes[0]
    fresh = NodeProcess(deployment.workdir, "node-late", **PACE)
    deployment.nodes.append(fresh)
    fresh.start()
    write_endpoints(deployment.endpoints, [survivor, fresh])  # the dead node leaves the list
    expected = {f"127.0.0.1:{survivor.port}": True, f"127.0.0.1:{fresh.port}": True}
    deployment.wait_for(lambda: deployment.readyz()["nodes"]["small-nodes"] == expected)
    before = deployment.served()
    results = run_streams(deployment.front, [f"late {i}" for i in range(30)])
    assert all(error is None for _, error in results), results
    after = deployment.served()
    assert after[str(fresh.port)] - before.get(str(fresh.port), 0) >= 8, (before, after)
