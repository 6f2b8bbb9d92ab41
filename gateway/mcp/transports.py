"""The SDK transport to one upstream, with its credential and a bound on what it answers.

``url`` servers use the SDK's streamable-HTTP (or SSE) client over an ``httpx2`` client
of their own: one per upstream connection, so its TCP connections are pooled across that
connection's calls and it carries only that connection's credential header. A POST's
answer is read through ``BoundedStream``, which stops at ``max_result_bytes`` (the SDK
reports the error for that request alone; an SSE answer also meets the SDK's event size
bound at the same limit). ``command`` servers use ``gateway.mcp.stdio``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from gateway.mcp.stdio import TOO_LARGE, stdio_transport
from policies.mcp_spec import McpServerSpec, UpstreamCredential

# The SSE decoder's own bound reports first (its message names the limit); this one
# stops an answer of many events.
SSE_SLACK = 1024 * 1024


class ResultTooLarge(httpx2.StreamError):
    """Raised while reading an answer past the limit (the SDK reports a ``StreamError``
    for the request it answered)."""


class BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self.inner, self.limit = inner, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise ResultTooLarge(f"{TOO_LARGE} {self.limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """Answers to POSTs (one per request) are bounded; the GET stream of a session's
    notifications is not (it lives as long as the session)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self.inner, self.limit = inner, limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if request.method != "POST":
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=BoundedStream(response.stream, self.limit + (SSE_SLACK if events else 0)),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def credential_value(credential: UpstreamCredential) -> str:
    """The secret, read now (a missing variable is an upstream that cannot connect)."""
    value = os.environ.get(credential.from_env)
    if not value:
        raise LookupError(f"the environment has no {credential.from_env}")
    return value


def _http_client(
    credential: UpstreamCredential | None, limit: int, connect_s: float, read_s: float
) -> httpx2.AsyncClient:
    headers: dict[str, str] = {}
    if credential is not None:
        headers[credential.header] = credential.prefix + credential_value(credential)
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(connect_s, read=read_s),
        transport=BoundedTransport(httpx2.AsyncHTTPTransport(), limit),
    )


def open_transport(
    spec: McpServerSpec,
    credential: UpstreamCredential | None,
    *,
    limit: int,
    connect_s: float,
    read_s: float,
    on_eof: Callable[[], None],
) -> AbstractAsyncContextManager[Any]:
    """The (read, write) streams to the upstream, as an SDK ``Transport``."""
    if spec.command is not None:
        env = dict(spec.env)
        if credential is not None and credential.env is not None:
            env[credential.env] = credential_value(credential)
        return stdio_transport(spec.command, env, spec.cwd, limit, on_eof)
    assert spec.url is not None
    if spec.transport == "sse":

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return _http_client(credential, limit, connect_s, read_s)

        return sse_client(spec.url, httpx_client_factory=factory)
    client = _http_client(credential, limit, connect_s, read_s)
    return _owning(
        client, streamable_http_client(spec.url, http_client=client, max_sse_event_size=limit)
    )


class _owning(AbstractAsyncContextManager[Any]):
    """A transport that also closes the ``httpx2`` client it was given (the SDK leaves a
    client it did not create open)."""

    def __init__(self, client: httpx2.AsyncClient, inner: AbstractAsyncContextManager[Any]) -> None:
        self.client, self.inner = client, inner

    async def __aenter__(self) -> Any:
        await self.client.__aenter__()
        try:
            return await self.inner.__aenter__()
        except BaseException:
            await self.client.aclose()
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        try:
            return await self.inner.__aexit__(*exc)
        finally:
            await self.client.aclose()
