"""The one fake OpenAI-compatible upstream, for tests and benchmarks alike.

Raw asyncio + httptools (no framework), so it costs a few tens of microseconds per
request and never becomes the thing being measured. It serves ``/v1/chat/completions``
and ``/v1/completions``, whole JSON or SSE, with or without usage, and logprobs when
asked, and ``/v1/embeddings`` (vectors from the input's bytes). Like a real provider it
bills image parts as prompt tokens (``IMAGE_TOKENS``). Each model name maps to a
``Profile``: the text, the pace (delay, gaps between chunks) and an injected fault (an
error status and body, a dropped connection or a stall mid-stream). ``default`` answers
models with no profile of their own (else a 404).

    async with Upstream({"m": Profile(chunks=4)}) as up: ...   # on the test's loop
    with running_upstream(...) as up: ...                       # in a thread, for sync code

Alone: ``python -m tiergate_testing.upstream --port 9000`` (``BENCH_PROFILES``).
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast

import httptools
import orjson

from tiergate_testing.answers import IMAGE_TOKENS, Answer, embeddings_body, error_body
from tiergate_testing.profiles import (
    BENCH_PROFILES,
    GREETING,
    PROVIDER_ERRORS,
    PROVIDER_MODELS,
    Profile,
)

__all__ = [
    "BENCH_PROFILES",
    "GREETING",
    "IMAGE_TOKENS",
    "PROVIDER_ERRORS",
    "PROVIDER_MODELS",
    "Profile",
    "Upstream",
    "UpstreamStats",
    "running_upstream",
]


@dataclass(slots=True)
class UpstreamStats:
    requests: int = 0
    connections: int = 0
    streams_started: int = 0
    streams_completed: int = 0
    streams_cut_by_client: int = 0  # the client closed the connection mid-stream
    answers_cut_by_client: int = 0  # ... or while a delayed whole answer was pending
    bodies: list[dict[str, object]] = field(default_factory=list)
    keep_bodies: bool = False  # every request body, in order, into ``bodies``


def _headers(status: int, content_type: bytes, length: int | None) -> bytes:
    try:
        reason = HTTPStatus(status).phrase.encode()
    except ValueError:
        reason = b"Error"
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s\r\n\r\n" % (
        status,
        reason,
        content_type,
        framing,
    )


class _Connection(asyncio.Protocol):
    def __init__(self, server: Upstream) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.body: list[bytes] = []
        self.text_completion = False
        self.embeddings = False
        self.task: asyncio.Task[None] | None = None
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.server.connections.add(self)
        self.server.stats.connections += 1

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.text_completion = url.endswith(b"/completions") and not url.endswith(
            b"chat/completions"
        )
        self.embeddings = url.endswith(b"/embeddings")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.parser.get_method() == b"GET":  # a readiness probe
            self._write(_headers(200, b"application/json", 2) + b"{}")
            return
        raw = b"".join(self.body)
        stats = self.server.stats
        stats.requests += 1
        try:
            request = orjson.loads(raw)
            model = str(request["model"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self._error(400, {"message": "the body must be JSON with a model"})
            return
        if stats.keep_bodies:
            stats.bodies.append(request)
        profile = self.server.profiles.get(model, self.server.default)
        if profile is None:
            self._error(404, {"message": f"The model `{model}` does not exist"})
            return
        if profile.fail_status is not None:
            error = profile.fail_error or {"message": f"injected failure {profile.fail_status}"}
            self._error(profile.fail_status, error)
            return
        if self.embeddings:
            body = embeddings_body(request)
            self._write(_headers(200, b"application/json", len(body)) + body)
            return
        answer = Answer(model, profile, request, len(raw), self.text_completion)
        if request.get("stream"):
            self.task = asyncio.ensure_future(self._stream(answer))
        elif profile.delay_s > 0:
            self.task = asyncio.ensure_future(self._later(answer))
        else:
            self._whole(answer)

    # responses
    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _error(self, status: int, error: dict[str, object]) -> None:
        body = error_body(status, error)
        self._write(_headers(status, b"application/json", len(body)) + body)

    def _whole(self, answer: Answer) -> None:
        body = answer.whole()
        self._write(_headers(200, b"application/json", len(body)) + body)

    async def _later(self, answer: Answer) -> None:
        try:
            await asyncio.sleep(answer.profile.delay_s)
        except asyncio.CancelledError:
            self.server.stats.answers_cut_by_client += 1
            raise
        self._whole(answer)

    def _event(self, data: bytes) -> None:
        self._write(b"%x\r\n%s\r\n" % (len(data), data))

    async def _stream(self, answer: Answer) -> None:
        stats, profile = self.server.stats, answer.profile
        stats.streams_started += 1
        try:
            await asyncio.sleep(profile.delay_s)
            self._write(_headers(200, b"text/event-stream", None))
            for i, text in enumerate(answer.texts):
                if i and profile.gap_s:
                    await asyncio.sleep(profile.gap_s)
                if i == profile.fail_after_chunks:
                    self.close()
                    return
                if i == profile.stall_after_chunks:
                    await asyncio.Event().wait()  # until the client gives up
                stamp = f"@{time.monotonic():.6f}@ " if profile.stamp else text
                self._event(answer.chunk(i, stamp))
            for data in answer.ending():
                self._event(data)
            self._write(b"0\r\n\r\n")
            stats.streams_completed += 1
        except asyncio.CancelledError:
            stats.streams_cut_by_client += 1
            raise


class Upstream:
    """``async with Upstream(profiles) as up:`` serves on ``up.base_url`` until the block ends."""

    def __init__(
        self,
        profiles: dict[str, Profile] | None = None,
        *,
        default: Profile | None = None,
        keep_bodies: bool = False,
        port: int = 0,
    ) -> None:
        self.profiles = dict(BENCH_PROFILES if profiles is None else profiles)
        self.default = default
        self.port = port
        self.stats = UpstreamStats(keep_bodies=keep_bodies)
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[_Connection] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), "127.0.0.1", self.port, backlog=4096
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()

    async def __aenter__(self) -> Upstream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextmanager
def running_upstream(
    profiles: dict[str, Profile] | None = None,
    *,
    default: Profile | None = None,
    keep_bodies: bool = True,
) -> Iterator[Upstream]:
    """An ``Upstream`` on its own event loop in a thread, for synchronous code; without
    arguments, the provider look-alike (``GREETING`` for any model, ``PROVIDER_MODELS``)."""
    if profiles is None and default is None:
        profiles, default = PROVIDER_MODELS, GREETING
    upstream = Upstream(profiles or {}, default=default, keep_bodies=keep_bodies)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(upstream.start(), loop).result(30)
        yield upstream
    finally:
        asyncio.run_coroutine_threadsafe(upstream.aclose(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _serve(port: int) -> None:
    upstream = Upstream(port=port)
    await upstream.start()
    print(f"upstream listening on {upstream.base_url}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    import uvloop

    uvloop.run(_serve(args.port))


if __name__ == "__main__":
    main()
