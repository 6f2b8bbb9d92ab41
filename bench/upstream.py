"""A fast OpenAI-compatible upstream on loopback, for the benchmark and the backend tests.

Raw asyncio + httptools (no framework), so the upstream costs a few tens of microseconds
per request and never becomes the thing being measured. Each model name maps to a
``Profile`` (delay before the answer, chunk count and spacing, an injected failure),
so one process serves the 0 ms and the 20 ms upstreams side by side.

Run it alone: ``python bench/upstream.py --port 9000`` (models ``bench-0ms``,
``bench-20ms``, ``bench-stream``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from typing import cast

import httptools
import orjson

WORD = "tok "


@dataclass(frozen=True, slots=True)
class Profile:
    delay_s: float = 0.0  # before the answer (non-streaming) or the first chunk (streaming)
    chunks: int = 16  # completion tokens, one chunk each when streaming
    gap_s: float = 0.0  # between streamed chunks
    fail_status: int | None = None  # answer with this HTTP status and an OpenAI error body
    fail_after_chunks: int | None = None  # streaming: drop the connection after N chunks
    stamp: bool = False  # streamed text is "@<time.monotonic()>@ ": the client can tell
    # the gaps the upstream made from those added on the way
    word: str = WORD  # the text of each chunk
    usage: bool = True  # False: report no usage, as some providers do


DEFAULT_PROFILES: dict[str, Profile] = {
    "bench-0ms": Profile(),
    "bench-20ms": Profile(delay_s=0.020),
    "bench-stream": Profile(delay_s=0.020, chunks=32, gap_s=0.010, stamp=True),
}


@dataclass(slots=True)
class UpstreamStats:
    requests: int = 0
    connections: int = 0
    streams_started: int = 0
    streams_completed: int = 0
    streams_cut_by_client: int = 0  # the client closed the connection mid-stream
    answers_cut_by_client: int = 0  # ... or while a delayed whole answer was pending
    bodies: list[dict[str, object]] = field(default_factory=list)
    keep_bodies: bool = False


def _headers(status: int, content_type: bytes, length: int | None) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 429: b"Too Many Requests"}.get(status, b"Error")
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s\r\n\r\n" % (
        status,
        reason,
        content_type,
        framing,
    )


def _usage(prompt_bytes: int, completion: int) -> dict[str, object]:
    prompt = max(prompt_bytes // 4, 1)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


class _Connection(asyncio.Protocol):
    def __init__(self, server: Upstream) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.body: list[bytes] = []
        self.text_completion = False
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
            self._close()

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

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.parser.get_method() == b"GET":  # a readiness probe
            self._write(_headers(200, b"application/json", 2) + b"{}")
            return
        raw = b"".join(self.body)
        self.server.stats.requests += 1
        try:
            request = orjson.loads(raw)
            model = str(request["model"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self._error(400, "the body must be JSON with a model")
            return
        if self.server.stats.keep_bodies:
            self.server.stats.bodies.append(request)
        profile = self.server.profiles.get(model)
        if profile is None:
            self._error(404, f"The model `{model}` does not exist")
            return
        if profile.fail_status is not None:
            self._error(profile.fail_status, f"injected failure {profile.fail_status}")
            return
        if request.get("stream"):
            options = request.get("stream_options") or {}
            usage = bool(options.get("include_usage"))
            self.task = asyncio.ensure_future(self._stream(model, profile, len(raw), usage))
        elif profile.delay_s > 0:
            self.task = asyncio.ensure_future(self._later(model, profile, len(raw)))
        else:
            self._whole(model, profile, len(raw))

    # responses
    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _error(self, status: int, message: str) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = orjson.dumps({"error": {"message": message, "type": kind, "code": None}})
        self._write(_headers(status, b"application/json", len(body)) + body)

    def _whole(self, model: str, profile: Profile, prompt_bytes: int) -> None:
        text = profile.word * profile.chunks
        choice: dict[str, object] = {"index": 0, "finish_reason": "stop"}
        if self.text_completion:
            choice["text"] = text
        else:
            choice["message"] = {"role": "assistant", "content": text}
        answer: dict[str, object] = {
            "id": "up-1",
            "object": "text_completion" if self.text_completion else "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
        }
        if profile.usage:
            answer["usage"] = _usage(prompt_bytes, profile.chunks)
        body = orjson.dumps(answer)
        self._write(_headers(200, b"application/json", len(body)) + body)

    async def _later(self, model: str, profile: Profile, prompt_bytes: int) -> None:
        try:
            await asyncio.sleep(profile.delay_s)
        except asyncio.CancelledError:
            self.server.stats.answers_cut_by_client += 1
            raise
        self._whole(model, profile, prompt_bytes)

    def _event(self, body: dict[str, object]) -> None:
        data = b"data: " + orjson.dumps(body) + b"\n\n"
        self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def _choice(self, i: int, text: str, finish: str | None) -> dict[str, object]:
        if self.text_completion:
            return {"index": 0, "text": text, "finish_reason": finish}
        delta = {"content": text} if i else {"role": "assistant", "content": text}
        return {"index": 0, "delta": delta if text else {}, "finish_reason": finish}

    async def _stream(self, model: str, profile: Profile, prompt_bytes: int, usage: bool) -> None:
        stats = self.server.stats
        stats.streams_started += 1
        base = {"id": "up-1", "object": "chat.completion.chunk", "created": 0, "model": model}
        try:
            await asyncio.sleep(profile.delay_s)
            self._write(_headers(200, b"text/event-stream", None))
            for i in range(profile.chunks):
                if i and profile.gap_s:
                    await asyncio.sleep(profile.gap_s)
                if profile.fail_after_chunks is not None and i >= profile.fail_after_chunks:
                    self._close()
                    return
                text = f"@{time.monotonic():.6f}@ " if profile.stamp else profile.word
                self._event({**base, "choices": [self._choice(i, text, None)]})
            self._event({**base, "choices": [self._choice(1, "", "stop")]})
            if usage and profile.usage:
                self._event({**base, "choices": [], "usage": _usage(prompt_bytes, profile.chunks)})
            data = b"data: [DONE]\n\n"
            self._write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            stats.streams_completed += 1
        except asyncio.CancelledError:
            stats.streams_cut_by_client += 1
            raise


class Upstream:
    """``async with Upstream(profiles) as up:`` serves on ``up.base_url`` until the block ends."""

    def __init__(self, profiles: dict[str, Profile] | None = None, port: int = 0) -> None:
        self.profiles = dict(DEFAULT_PROFILES if profiles is None else profiles)
        self.port = port
        self.stats = UpstreamStats()
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
                connection._close()
            await self._server.wait_closed()

    async def __aenter__(self) -> Upstream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


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
