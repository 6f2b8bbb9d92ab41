"""Engines for the backend tests, built once and kept on one background event loop.

Real engines (vLLM, llama.cpp) are expensive to start, so they are session-scoped and
live on a dedicated loop thread; tests submit coroutines to it with ``loop.run``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support import REPO
from tiergate_testing.configs import SMOLLM2

T = TypeVar("T")

# vLLM on CPU: a small KV cache and no thread pinning (the CI box has 2 shared cores).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="session")
def engine_loop() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model the vLLM tests load; bench/gpu/vllm_check.py may point at a local HF folder."""
    if os.environ.get("TIERGATE_TEST_VLLM_MODEL"):
        return Path(os.environ["TIERGATE_TEST_VLLM_MODEL"])
    from tiergate_testing.tiny_llama import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def vllm_options(model_path: Path) -> dict[str, Any]:
    """CPU defaults; ``TIERGATE_TEST_VLLM_OPTIONS`` (JSON) overrides them, e.g. on a GPU."""
    return {
        "model_path": str(model_path),
        "dtype": "bfloat16",
        "max_model_len": 1024,
        "max_num_seqs": 8,
        "enable_prefix_caching": True,
        "enforce_eager": True,
        "seed": 0,
        **json.loads(os.environ.get("TIERGATE_TEST_VLLM_OPTIONS", "{}")),
    }


@pytest.fixture(scope="session")
def vllm_engines(engine_loop: LoopThread, tiny_llama: Path) -> Iterator[list[Any]]:
    """Two AsyncLLM engines in this one process, started together; the second schedules
    by priority (equal priorities: first come, first served, as the first)."""
    from backends.vllm import VllmEngine

    policies = [{}, {"engine_args": {"scheduling_policy": "priority"}}]
    engines = [
        VllmEngine(name=f"vllm-{i}", model="tiny-llama", **vllm_options(tiny_llama), **policy)
        for i, policy in enumerate(policies)
    ]

    async def start() -> None:
        if os.environ.get("TIERGATE_TEST_VLLM_SEQUENTIAL"):  # GPU memory profiling
            for engine in engines:
                await engine.start()
        else:
            await asyncio.gather(*(e.start() for e in engines))

    engine_loop.run(start(), timeout=600)
    yield engines

    async def stop() -> None:
        await asyncio.gather(*(e.aclose() for e in engines))

    engine_loop.run(stop(), timeout=120)


@pytest.fixture(scope="session")
def llamacpp_engine(engine_loop: LoopThread) -> Iterator[Any]:
    from backends.llamacpp import LlamaCppEngine

    engine = LlamaCppEngine(
        name="smollm2-0", model="smollm2", model_path=SMOLLM2, n_ctx=2048, n_threads=1
    )
    engine_loop.run(engine.start())
    yield engine
    engine_loop.run(engine.aclose())


def sglang_bridge_options(tools: bool = True, **server_args: Any) -> dict[str, Any]:
    """A real worker process around the fake engine; with ``tools``, the fake
    ``FunctionCallParser`` module and its hermes parser."""
    options: dict[str, Any] = {
        "engine_factory": "tests.backends.fake_sglang:FakeSglangEngine",
        "server_args": server_args,
        "env": {"PYTHONPATH": str(REPO)},
        "load_interval_s": 0.05,
        "start_timeout_s": 60.0,
        "stop_timeout_s": 10.0,
    }
    if tools:
        options["tool_call_parser"] = "hermes"
        options["function_call_module"] = "tests.backends.fake_sglang_calls"
    return options


@pytest.fixture(scope="session")
def sglang_bridge(engine_loop: LoopThread) -> Iterator[Any]:
    from backends.sglang import SglangEngine

    engine = SglangEngine(
        name="sglang-0", model="fake-sglang", **sglang_bridge_options(fake_token_delay_s=0.002)
    )
    engine_loop.run(engine.start())
    yield engine
    engine_loop.run(engine.aclose())


@pytest.fixture(scope="session")
def sglang_gateway() -> Iterator[Any]:
    """A real gateway whose ``small`` tier is one SGLang worker process (around the fake
    engine and the fake FunctionCallParser module, hermes format)."""
    from tiergate_testing.configs import fake_config
    from tiergate_testing.gateways import running_gateway

    config = fake_config()
    config["engines"]["sglang"] = {
        "backend": "sglang",
        "model": "fake-sglang",
        "options": sglang_bridge_options(),
    }
    config["tiers"]["small"] = {"engines": ["sglang"]}
    config["prices"]["fake-sglang"] = {"input": 1.0, "output": 2.0}
    with running_gateway(config) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def vllm_gateway(tiny_llama: Path) -> Iterator[Any]:
    """One real gateway over one in-process vLLM engine (with vLLM's hermes tool parser),
    shared by every gateway-level vLLM test: an engine start costs 25-40 s on CPU."""
    from tiergate_testing.configs import fake_config
    from tiergate_testing.gateways import running_gateway

    config = fake_config()
    config["engines"]["tiny"] = {
        "backend": "vllm",
        "model": "tiny-llama",
        "options": {**vllm_options(tiny_llama), "max_num_seqs": 4, "tool_parser": "hermes"},
    }
    config["tiers"]["small"] = {"engines": ["tiny"]}
    config["prices"]["tiny-llama"] = {"input": 1.0, "cached_input": 0.1, "output": 2.0}
    with running_gateway(config) as gateway:
        yield gateway
