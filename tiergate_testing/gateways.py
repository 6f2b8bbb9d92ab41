"""A running gateway on a free loopback port: in this process or as ``tiergate serve``.

``running_gateway(config)`` serves the app with ``tiergate serve``'s own uvicorn settings
in a background thread (its own event loop), so a test can also reach into its state.
``GatewayProcess(config, workdir)`` runs ``python -m gateway serve`` as a child process
(its own log, SIGHUP, SIGKILL as a lost machine). Both wait until the gateway answers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import Field, fields, replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from gateway.app import create_app
from gateway.core.serving_core import ServingCore
from gateway.edge.server import server_config
from gateway.state import GatewayState
from policies.schema import GatewayConfig
from tiergate_testing.configs import OTHER_KEY, TEST_KEY
from tiergate_testing.net import free_port

# The source tree this package sits in: a child process imports the same code.
REPO = Path(__file__).resolve().parent.parent


def subprocess_env(**extra: str) -> dict[str, str]:
    """This process's environment with ``REPO`` first on the child's import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


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

    def swap(self, **collaborators: Any) -> None:
        """Replace collaborators of the running gateway (``classifier=``, ``embedder=``, a
        failing ``ledger=``…: the router's, the money's or the core's own) in a new serving
        core over the same snapshot; requests that follow run on it."""

        async def apply() -> None:
            state = self.state
            parts = state.parts
            changes = dict(collaborators)
            router = replace(parts.router, **_take(changes, fields(parts.router)))
            money = replace(parts.money, **_take(changes, fields(parts.money)))
            new = replace(parts, router=router, money=money, **changes)
            state.core = ServingCore(state.config, new)

        self.call(apply())


def _take(changes: dict[str, Any], names: tuple[Field[Any], ...]) -> dict[str, Any]:
    """The changes among ``names``, removed from ``changes``."""
    return {f.name: changes.pop(f.name) for f in names if f.name in changes}


async def concurrent_chats(base_urls: Sequence[str], n: int, **params: Any) -> list[Any]:
    """``n`` chat completions at once with the official async client, dealt round-robin
    over the gateways; each result is the completion or the ``APIStatusError`` it raised."""
    import openai

    clients = [
        openai.AsyncOpenAI(base_url=url + "/v1", api_key=TEST_KEY, max_retries=0)
        for url in base_urls
    ]

    async def call(i: int) -> Any:
        try:
            return await clients[i % len(clients)].chat.completions.create(**params)
        except openai.APIStatusError as exc:
            return exc

    try:
        return list(await asyncio.gather(*(call(i) for i in range(n))))
    finally:
        for client in clients:
            await client.close()


@contextmanager
def running_gateway(
    config: dict[str, Any] | GatewayConfig,
    config_source: Callable[[], GatewayConfig] | None = None,
    *,
    tracer_provider: Any = None,
    start_timeout_s: float = 120.0,
    server_options: Mapping[str, Any] | None = None,
    new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
) -> Iterator[RunningGateway]:
    """A real uvicorn server for ``config`` in a background thread, on its own loop (started
    once its engines are: ``start_timeout_s`` bounds that); ``server_options`` override
    uvicorn settings (``http=`` a protocol class); ``new_loop`` makes the loop
    (``uvloop.new_event_loop``: the one ``tiergate serve`` runs on)."""
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    os.environ.setdefault("TIERGATE_OTHER_KEY", OTHER_KEY)
    if isinstance(config, dict):
        config = GatewayConfig.model_validate(config)
    port = free_port()
    app = create_app(config, config_source, tracer_provider=tracer_provider)
    # The same hardened uvicorn settings as ``tiergate serve`` (gateway.edge.server).
    server = uvicorn.Server(
        server_config(
            app, config, host="127.0.0.1", port=port, log_level="warning", **(server_options or {})
        )
    )
    gateway = RunningGateway(server, port)

    def serve() -> None:
        loop = new_loop()
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


class GatewayProcess:
    """``python -m gateway serve`` for ``config`` (written to ``workdir/<name>.yaml``; None:
    the default config) on 127.0.0.1:``port`` (a free one by default), its output in
    ``workdir/<name>.log``. ``base_url`` is the server, ``api_url`` its ``/v1``.

    ``env``: the child's whole environment (default ``subprocess_env()``); ``prefix``:
    argv before Python (``taskset -c 1``); ``module``: what ``python -m`` runs (one that
    wraps ``gateway``'s CLI); ``ready_path``: what ``start`` polls until 200.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None,
        workdir: Path,
        *,
        name: str = "gateway",
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        prefix: Sequence[str] = (),
        module: str = "gateway",
        ready_path: str = "/readyz",
        ready_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.port = free_port() if port is None else port
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.api_url = self.base_url + "/v1"
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{name}.log"
        self.env = dict(subprocess_env() if env is None else env)
        self.argv = [*prefix, sys.executable, "-m", module, "serve"]
        self.argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.config_path: Path | None = None
        if config is not None:
            self.config_path = workdir / f"{name}.yaml"
            # The file order matters (tiers are listed cheapest first): keep it.
            self.config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
            self.argv += ["--config", str(self.config_path)]
        self.ready_path = ready_path
        self.ready_headers = dict(ready_headers or {})
        self.popen: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        """Start the process (in its own session: ``stop`` ends its whole group); its output
        is appended to the log, so a restart keeps what the killed process wrote."""
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exited():
                raise RuntimeError(f"{self.name} exited: {self.log_text()[-2000:]}")
            try:
                answer = httpx.get(
                    self.base_url + self.ready_path, headers=self.ready_headers, timeout=2.0
                )
                if answer.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not ready in {timeout_s:.0f}s: {self.log_text()[-2000:]}")

    def start(self, timeout_s: float = 120.0) -> GatewayProcess:
        self.spawn()
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def exited(self) -> bool:
        return self.popen is not None and self.popen.poll() is not None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def send_signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as a machine that is lost."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (a graceful drain), then SIGKILL after ``timeout_s``."""
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
