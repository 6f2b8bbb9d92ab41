"""CPU per request of the gateway's own HTTP layer, in process, without sockets.

    python -m bench.perf.route_overhead                 # this checkout
    PYTHONPATH=/path/to/other/checkout python -m bench.perf.route_overhead   # a baseline

Drives the ASGI app directly (one event loop, no network, no load generator) with
``POST /v1/chat/completions`` on the protocol fake (8 tokens, JSON and stream) and
``GET /v1/models``, and reports process CPU microseconds per request: median and range
over rounds. Run it for the baseline and the change in the same session, alternating.

``--body`` compares, on two bare routes added for the run, the gateway's own body
parsing (bounded read, orjson, ``model_validate``) with FastAPI's (the wire model as a
body parameter): why the routes parse bodies themselves and only feed the schema.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from gateway.app import create_app
from gateway.chat.protocol import ChatCompletionRequest
from gateway.edge.http import read_body
from gateway.wire.common import parse_body
from policies.schema import GatewayConfig

KEY = "tg-bench-key-0123456789"
CHAT = orjson.dumps({"model": "small", "messages": [{"role": "user", "content": "hello there"}]})
STREAM = orjson.dumps(
    {"model": "small", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
)


def config() -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "engines": {"fake": {"backend": "fake", "model": "fake", "options": {"tokens": 8}}},
            "tiers": {name: {"engines": ["fake"]} for name in ("small", "medium", "large")},
            "prices": {"fake": {"input": 1.0, "output": 2.0}},
            "tenants": {"acme": {"keys": [{"id": "acme-1", "from_env": "BENCH_ROUTE_KEY"}]}},
        }
    )


async def call(app: Any, method: str, path: str, body: bytes) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"bench"),
            (b"authorization", f"Bearer {KEY}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "state": {},
    }
    sent = False
    done = asyncio.Event()
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    await app(scope, receive, send)
    return status


async def measure(app: Any, method: str, path: str, body: bytes, n: int) -> float:
    for _ in range(50):
        assert await call(app, method, path, body) == 200
    started = time.process_time()
    for _ in range(n):
        await call(app, method, path, body)
    return (time.process_time() - started) * 1e6 / n


def add_body_routes(app: Any) -> None:
    # FastAPI reads these annotations by name: Request and the model are module imports.
    async def own(request: Request) -> Response:
        body = parse_body(ChatCompletionRequest, await read_body(request, 1 << 22, 10.0))
        return Response(body.model.encode())

    async def fastapi_body(body: ChatCompletionRequest) -> Response:
        return Response(body.model.encode())

    app.add_api_route("/bench/own-body", own, methods=["POST"])
    app.add_api_route("/bench/fastapi-body", fastapi_body, methods=["POST"])


async def main(rounds: int, n: int, body: bool) -> None:
    os.environ["BENCH_ROUTE_KEY"] = KEY
    app = create_app(config())
    cases = {
        "chat json": ("POST", "/v1/chat/completions", CHAT),
        "chat stream": ("POST", "/v1/chat/completions", STREAM),
        "models": ("GET", "/v1/models", b""),
    }
    if body:
        add_body_routes(app)
        cases = {
            "own body": ("POST", "/bench/own-body", CHAT),
            "fastapi body": ("POST", "/bench/fastapi-body", CHAT),
        }
    results: dict[str, list[float]] = {name: [] for name in cases}
    async with app.router.lifespan_context(app):
        for _ in range(rounds):
            for name, (method, path, body) in cases.items():
                results[name].append(await measure(app, method, path, body, n))
    for name, values in results.items():
        print(
            f"{name:13s} CPU us/request median {statistics.median(values):7.1f} "
            f"range [{min(values):.1f}..{max(values):.1f}] ({rounds} rounds x {n})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--body", action="store_true", help="own body parsing vs FastAPI's")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.requests, args.body))
