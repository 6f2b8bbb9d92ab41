"""A thin, fast passthrough to any OpenAI-compatible server (vLLM, SGLang, TGI, OpenAI…).

One pooled ``aiohttp`` session per engine, built in ``start()`` and closed in
``aclose()``; keep-alive connections are reused across requests. aiohttp rather than
httpx because it costs about a quarter of the CPU per streamed request here
(``bench/overhead.py`` is where that shows). Streams are parsed incrementally
(``backends/sse_parse.py``), usage is passed through as the server reported it, and
errors are mapped once, here, to ``backends.errors``. Cancelling the iterator closes
the upstream connection, which is how OpenAI-compatible servers learn to abort.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from yarl import URL

from backends.base import (
    Chunk,
    EngineCounters,
    EngineLoad,
    GenerationRequest,
    Usage,
    openai_options,
)
from backends.errors import (
    EngineError,
    EngineOverloaded,
    EngineUnavailable,
    UpstreamFailed,
    UpstreamRejected,
    UpstreamTimeout,
)
from backends.sse_parse import EventSplitter, ToolCallMerger, usage_of


def map_status(status: int, message: str) -> EngineError:
    """An upstream HTTP error status → our exception tree."""
    if status == 429:
        return EngineOverloaded(message)
    if status in (408, 504):
        return UpstreamTimeout(message)
    if status in (502, 503):
        return EngineUnavailable(message)
    if status in (401, 403):
        return UpstreamFailed(f"the upstream refused our credentials: {message}")
    if 400 <= status < 500:
        return UpstreamRejected(message, status=status)
    return UpstreamFailed(message)


def map_exception(exc: BaseException) -> EngineError:
    """An aiohttp/socket failure → our exception tree."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return EngineUnavailable(f"cannot connect to the upstream: {exc}")
    if isinstance(exc, TimeoutError):  # aiohttp's timeouts derive from it
        return UpstreamTimeout(f"the upstream did not answer in time: {exc!r}")
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return UpstreamFailed(f"the upstream closed the connection early: {exc!r}")
    return UpstreamFailed(f"upstream request failed: {exc!r}")


def _error_message(status: int, raw: bytes) -> str:
    try:
        body = orjson.loads(raw)
        message = body["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        message = raw[:300].decode("utf-8", "replace")
    return f"upstream answered {status}: {message}"


class OpenAICompatEngine:
    def __init__(
        self,
        *,
        name: str,
        model: str,
        api_base: str,
        upstream_model: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        max_connections: int = 512,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        self.api_base = api_base.rstrip("/")
        # Parsed once: aiohttp would parse a string URL on every request.
        self._urls = {
            path: URL(self.api_base + path) for path in ("/chat/completions", "/completions")
        }
        self.upstream_model = upstream_model or model
        self.api_key = api_key or (os.environ.get(api_key_env) if api_key_env else None)
        self.timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout_s, sock_read=timeout_s
        )
        self.max_connections = max_connections
        self.extra_body = extra_body or {}
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self.api_key:
            self._headers["authorization"] = f"Bearer {self.api_key}"

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.max_connections, keepalive_timeout=30.0, enable_cleanup_closed=False
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self.timeout,
            headers=self._headers,
            skip_auto_headers=("User-Agent",),
        )

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def load(self) -> EngineLoad:
        return EngineLoad(running=self.counters.active, healthy=self._session is not None)

    def _payload(self, request: GenerationRequest, stream: bool) -> tuple[URL, bytes]:
        body: dict[str, Any] = {"model": self.upstream_model, **self.extra_body}
        if request.prompt is not None:
            path, body["prompt"] = "/completions", request.prompt
        else:
            path, body["messages"] = "/chat/completions", list(request.messages or ())
        body.update(openai_options(request))
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return self._urls[path], orjson.dumps(body)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        session = self._session
        if session is None:
            raise EngineUnavailable(f"{self.name} is not started")
        self.counters.started += 1
        finished = False
        try:
            if request.whole:
                chunk = await self._whole(session, request)
                finished = True
                yield chunk
                return
            async for chunk in self._streamed(session, request):
                if chunk.usage is not None:
                    finished = True
                yield chunk
        finally:
            if finished:
                self.counters.finished += 1
            else:
                self.counters.aborted += 1

    async def _open(
        self, session: aiohttp.ClientSession, url: URL, body: bytes
    ) -> aiohttp.ClientResponse:
        try:
            response = await session.post(url, data=body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise map_exception(exc) from exc
        if response.status != 200:
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise map_exception(exc) from exc
            finally:
                response.release()
            raise map_status(response.status, _error_message(response.status, raw))
        return response

    async def _whole(self, session: aiohttp.ClientSession, request: GenerationRequest) -> Chunk:
        url, body = self._payload(request, stream=False)
        response = await self._open(session, url, body)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise map_exception(exc) from exc
        finally:
            # Unread (cancelled, failed): aiohttp closes the connection, and the server aborts.
            response.release()
        try:
            data = orjson.loads(raw)
            choice = data["choices"][0]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamFailed(f"the upstream sent an unreadable answer: {exc!r}") from exc
        message = choice.get("message")
        text = (message.get("content") if message else choice.get("text")) or ""
        calls = (message or {}).get("tool_calls") or None
        # No usage from the server: None, and the gateway charges what the reservation assumed.
        usage = usage_of(data.get("usage"))
        if usage is not None:
            self.counters.generated_tokens += usage.completion_tokens
        return Chunk(
            text=text,
            finish_reason=choice.get("finish_reason") or "stop",
            usage=usage,
            tool_calls=tuple(calls) if calls else None,
        )

    async def _streamed(
        self, session: aiohttp.ClientSession, request: GenerationRequest
    ) -> AsyncIterator[Chunk]:
        url, body = self._payload(request, stream=True)
        response = await self._open(session, url, body)
        complete = False
        try:
            splitter = EventSplitter()
            calls = ToolCallMerger()
            finish = "stop"
            usage: Usage | None = None
            chars = 0
            done = False
            try:
                async for data in response.content.iter_any():
                    for event in splitter.feed(data):
                        if done:
                            continue  # read on to the end, so the connection can be reused
                        if event == b"[DONE]":
                            done = True
                            continue
                        try:
                            part = orjson.loads(event)
                        except orjson.JSONDecodeError as exc:
                            raise UpstreamFailed(f"unreadable stream event: {exc}") from exc
                        if "error" in part:
                            raise UpstreamFailed(_error_message(200, event))
                        usage = usage_of(part.get("usage")) or usage
                        for choice in part.get("choices") or ():
                            delta = choice.get("delta")
                            text = (delta.get("content") if delta else choice.get("text")) or ""
                            if delta and delta.get("tool_calls"):
                                calls.merge(delta["tool_calls"])
                            if choice.get("finish_reason"):
                                finish = choice["finish_reason"]
                            if text:
                                chars += len(text)
                                yield Chunk(text=text)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise map_exception(exc) from exc
            if not done:
                raise UpstreamFailed("the upstream stream ended without [DONE]")
            # No usage from the server: None, and the gateway charges an upper count (never
            # below what the reservation assumed) rather than a guess that undercounts CJK.
            self.counters.generated_tokens += usage.completion_tokens if usage else chars
            complete = True
            yield Chunk(finish_reason=finish, usage=usage, tool_calls=calls.result())
        finally:
            if complete:
                response.release()
            else:
                # Mid-stream: drop the connection (not back to the pool) so the server aborts.
                response.close()
