"""A thin, fast passthrough to any OpenAI-compatible server (vLLM, SGLang, TGI, OpenAI…).

One pooled ``aiohttp`` session per engine, built in ``start()`` and closed in
``aclose()``; keep-alive connections are reused across requests. aiohttp rather than
httpx because it costs about a quarter of the CPU per streamed request here
(``bench/perf/overhead.py`` is where that shows). Streams are parsed incrementally
(``backends/sse_parse.py``), usage is passed through as the server reported it, and
errors are mapped once, here, to ``backends.errors``. Cancelling the iterator closes
the upstream connection, which is how OpenAI-compatible servers learn to abort.

An engine for a tiergate engine node (``probe_load=True``, set by discovery) also reads
the node's engine load from ``<api_base>/load`` (``probe()``) and reports it as its own;
a failed read, or a connection that breaks, marks it unhealthy until a read succeeds, so
the pool stops picking it and retries its unstarted requests on another node.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from yarl import URL

from backends.base import (
    FEATURES,
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
from backends.sse_parse import EventSplitter, ToolCallMerger, logprobs_of, usage_of

log = logging.getLogger(__name__)


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


def _load_of(raw: bytes) -> EngineLoad | None:
    """A node's ``/v1/load`` answer → its load; None when it is not one."""
    try:
        body = orjson.loads(raw)
        return EngineLoad(
            running=int(body["running"]),
            waiting=int(body["waiting"]),
            kv_usage=float(body["kv_usage"]),
            healthy=bool(body["healthy"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


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
        probe_load: bool = False,
        probe_timeout_s: float = 1.0,
    ) -> None:
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        self.capabilities = FEATURES  # the server it forwards to answers for the rest
        self.api_base = api_base.rstrip("/")
        # Parsed once: aiohttp would parse a string URL on every request.
        self._urls = {
            path: URL(self.api_base + path)
            for path in ("/chat/completions", "/completions", "/embeddings")
        }
        self.upstream_model = upstream_model or model
        self.api_key = api_key or (os.environ.get(api_key_env) if api_key_env else None)
        self.timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout_s, sock_read=timeout_s
        )
        self.max_connections = max_connections
        self.extra_body = extra_body or {}
        self._session: aiohttp.ClientSession | None = None
        self.probe_load = probe_load
        self._load_url = URL(self.api_base + "/load")
        self._probe_timeout = aiohttp.ClientTimeout(total=probe_timeout_s)
        self._remote: EngineLoad | None = None  # the node's last reading; None: unreachable
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
        if not self.probe_load:
            return EngineLoad(running=self.counters.active, healthy=self._session is not None)
        remote = self._remote
        if remote is None or self._session is None:
            return EngineLoad(running=self.counters.active, healthy=False)
        return EngineLoad(
            running=max(remote.running, self.counters.active),
            waiting=remote.waiting,
            kv_usage=remote.kv_usage,
            healthy=remote.healthy,
        )

    async def probe(self) -> EngineLoad | None:
        """Read the node's engine load (GET <api_base>/load); None when it did not answer."""
        session = self._session
        if session is None:
            return None
        try:
            async with session.get(self._load_url, timeout=self._probe_timeout) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._set_remote(None, f"load read failed: {exc!r}")
            return None
        self._set_remote(_load_of(raw) if status == 200 else None, f"load answered {status}")
        return self._remote

    def _set_remote(self, load: EngineLoad | None, why: str) -> None:
        was = self._remote is not None and self._remote.healthy
        self._remote = load
        now = load is not None and load.healthy
        if was != now:
            # Wall-clock time in the message: bench/perf/multinode.py times failover from it.
            state = "back in rotation" if now else f"out of rotation ({why})"
            log.warning("%s %s at unix %.3f", self.name, state, time.time())

    def _broken(self, exc: BaseException) -> EngineError:
        """Map a transport failure; on a node, a broken connection takes it out of rotation."""
        if self.probe_load and isinstance(
            exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError
        ):
            self._set_remote(None, f"connection broke: {exc!r}")
        return map_exception(exc)

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

    async def embed(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST <api_base>/embeddings`` with ``body`` under this engine's upstream model;
        the server's answer as it sent it (``data``, ``usage``)."""
        session = self._session
        if session is None:
            raise EngineUnavailable(f"{self.name} is not started")
        payload = orjson.dumps({**body, "model": self.upstream_model})
        raw = await self._read(session, self._urls["/embeddings"], payload)
        try:
            data: dict[str, Any] = orjson.loads(raw)
            if not isinstance(data["data"], list):
                raise TypeError("data is not a list")
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise UpstreamFailed(f"the upstream sent an unreadable answer: {exc!r}") from exc
        return data

    async def _open(
        self, session: aiohttp.ClientSession, url: URL, body: bytes
    ) -> aiohttp.ClientResponse:
        try:
            response = await session.post(url, data=body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._broken(exc) from exc
        if response.status != 200:
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise self._broken(exc) from exc
            finally:
                response.release()
            raise map_status(response.status, _error_message(response.status, raw))
        return response

    async def _read(self, session: aiohttp.ClientSession, url: URL, body: bytes) -> bytes:
        """POST ``body`` and read the whole 200 answer."""
        response = await self._open(session, url, body)
        try:
            return await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._broken(exc) from exc
        finally:
            # Unread (cancelled, failed): aiohttp closes the connection, and the server aborts.
            response.release()

    async def _whole(self, session: aiohttp.ClientSession, request: GenerationRequest) -> Chunk:
        raw = await self._read(session, *self._payload(request, stream=False))
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
            logprobs=logprobs_of(choice.get("logprobs")),
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
                            raw = choice.get("logprobs")  # mostly absent: no call per chunk
                            logprobs = logprobs_of(raw) if raw else None
                            if text or logprobs:
                                chars += len(text)
                                yield Chunk(text=text, logprobs=logprobs)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise self._broken(exc) from exc
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
