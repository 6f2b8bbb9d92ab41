"""A recording reverse proxy: what a real client sends, kept, then passed on unchanged.

Put it between a client that cannot be instrumented (Codex CLI, a compiled binary) and
the gateway: each request's method, path, headers and JSON body are kept in
``requests``, and the gateway's answer (an SSE stream included) is streamed back as it
arrives. ``python -m tiergate_testing.recorder --port P --target URL`` prints each body
(how the Codex CLI request in docs/openai-compat.md was captured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tiergate_testing.net import free_port

# Hop-by-hop headers, and the ones aiohttp sets itself on the way out.
_DROPPED = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


@dataclass(frozen=True, slots=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the decoded JSON body (None when there was none)
    status: int  # the gateway's answer
    answer_headers: dict[str, str]


class Recorder:
    def __init__(self, target: str, *, port: int | None = None, echo: bool = False) -> None:
        self.target = target.rstrip("/")
        self.port = free_port() if port is None else port
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.echo = echo
        self.requests: list[Recorded] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        if self.echo:
            print(json.dumps({"path": request.path_qs, "body": body})[:4000], flush=True)
        assert self._session is not None
        async with self._session.request(
            request.method, self.target + request.path_qs, headers=headers, data=raw
        ) as answer:
            answered = {k.lower(): v for k, v in answer.headers.items()}
            self.requests.append(
                Recorded(request.method, request.path_qs, headers, body, answer.status, answered)
            )
            reply = web.StreamResponse(status=answer.status)
            for name, value in answer.headers.items():
                if name.lower() not in _DROPPED:
                    reply.headers[name] = value
            await reply.prepare(request)
            async for piece in answer.content.iter_any():
                await reply.write(piece)
            await reply.write_eof()
            return reply


@contextmanager
def running_recorder(target: str) -> Iterator[Recorder]:
    """A ``Recorder`` in front of ``target`` on its own event loop in a thread."""
    recorder = Recorder(target)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(recorder.start(), loop).result(30)
        yield recorder
    finally:
        asyncio.run_coroutine_threadsafe(recorder.aclose(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _serve(port: int, target: str) -> None:
    recorder = Recorder(target, port=port, echo=True)
    await recorder.start()
    print(f"recording on {recorder.base_url} -> {target}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.port, args.target))


if __name__ == "__main__":
    main()
