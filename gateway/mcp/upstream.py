"""One live connection to one upstream MCP server, under one credential, shared by every
call that uses that credential.

The connection is the SDK's ``Client`` (``mode="auto"``: the 2026 per-request protocol
where the server speaks it, else the ``initialize`` handshake), entered and left by a task
of its own (anyio's scopes must close in the task that opened them); calls from any
request share its ``ClientSession`` (JSON-RPC matches answers to calls by id). It is
opened on first use and again after it ends: a process that exited, a transport that
failed, a call answered "connection closed". A failed start waits before the next try
(1 s, doubling to 30 s), so a crashing server is not restarted on every call.

Listings (tools, prompts, resources, templates) are kept ``catalog_ttl_s`` per
connection and dropped when the upstream says its list changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from gateway.mcp.stdio import TOO_LARGE
from gateway.mcp.transports import open_transport
from policies.mcp_spec import McpConfig, McpServerSpec, UpstreamCredential

log = logging.getLogger(__name__)

MAX_PAGES = 100
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
STOP_TIMEOUT_S = 10.0
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Limits:
    """What a connection is opened with (from ``mcp:`` and the server's own)."""

    timeout_s: float
    connect_timeout_s: float
    max_result_bytes: int
    catalog_ttl_s: float

    @classmethod
    def of(cls, mcp: McpConfig, spec: McpServerSpec) -> Limits:
        timeout = spec.timeout_s if spec.timeout_s is not None else mcp.timeout_s
        return cls(timeout, mcp.connect_timeout_s, mcp.max_result_bytes, mcp.catalog_ttl_s)


class UpstreamFailure(Exception):
    """A call that did not get the upstream's answer: ``status`` is ``down`` (no
    connection), ``closed`` (it ended mid-call), ``timeout``, ``too_large``, or
    ``error`` (the upstream answered with a JSON-RPC error, passed on as it is)."""

    def __init__(self, status: str, message: str, code: int = types.INTERNAL_ERROR) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def size_of(result: BaseModel) -> int:
    """An answer's size as the client will get it (its JSON)."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True))


def too_large(server: str, limit: int) -> UpstreamFailure:
    return UpstreamFailure(
        "too_large", f"the result from upstream {server} is larger than {limit} bytes"
    )


def _too_large(message: str) -> bool:
    # Ours (transports, stdio), or the SDK's SSE decoder naming its byte limit.
    return TOO_LARGE in message or "byte limit" in message


class Upstream:
    def __init__(
        self,
        server: str,
        spec: McpServerSpec,
        credential: UpstreamCredential | None,
        limits: Limits,
    ) -> None:
        self.server, self.spec, self.credential, self.limits = server, spec, credential, limits
        self._client: Client | None = None
        self._ended = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._retry_at = 0.0
        self._backoff = RETRY_FIRST_S
        self._last_error = ""
        self._answered = False  # the current connection has answered a call
        self._respawn: asyncio.Task[None] | None = None
        self._listings: dict[str, tuple[float, asyncio.Task[list[Any]]]] = {}

    # -- the connection ---------------------------------------------------------------

    async def session(self) -> ClientSession:
        client = self._client
        if client is not None and not self._ended.is_set():
            return client.session
        async with self._lock:
            client = self._client
            if client is not None and not self._ended.is_set():
                return client.session
            return (await self._connect()).session

    async def _connect(self) -> Client:
        if self._closed:
            raise UpstreamFailure("down", f"upstream {self.server} was removed")
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            raise UpstreamFailure(
                "down",
                f"upstream {self.server} is down ({self._last_error}); next try in {wait:.1f}s",
            )
        await self._stop_task()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        ended = asyncio.Event()
        self._ended, self._listings = ended, {}
        self._task = asyncio.create_task(self._run(ready, ended), name=f"mcp-{self.server}")
        try:
            async with asyncio.timeout(self.limits.connect_timeout_s):
                client = await asyncio.shield(ready)
        except (TimeoutError, UpstreamFailure) as exc:
            ended.set()
            reason = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
            self._failed(reason)
            raise UpstreamFailure("down", f"upstream {self.server} is down ({reason})") from None
        self._client, self._answered = client, False
        return client

    def _failed(self, reason: str) -> None:
        self._last_error = reason
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, RETRY_MAX_S)
        log.warning("mcp upstream %s: %s", self.server, reason)

    async def _run(self, ready: asyncio.Future[Client], ended: asyncio.Event) -> None:
        """Open the SDK client, hold it until the connection ends, close it (one task)."""
        limits = self.limits
        try:
            transport = open_transport(
                self.spec,
                self.credential,
                limit=limits.max_result_bytes,
                connect_s=limits.connect_timeout_s,
                read_s=limits.timeout_s + limits.connect_timeout_s,
                on_eof=lambda: self._exited(ended),
            )
            client = Client(
                cast(Any, transport), mode="auto", cache=None, message_handler=self._notified
            )
            async with client:
                if not ready.done():
                    ready.set_result(client)
                await ended.wait()
        except Exception as exc:  # what ended it (a failed start, a dead transport): logged
            reason = _reason(exc)
            if not ready.done():
                ready.set_exception(UpstreamFailure("down", reason))
            elif not self._closed:
                log.warning("mcp upstream %s: connection ended: %s", self.server, reason)
        finally:
            ended.set()
            if not ready.done():
                ready.cancel()

    def _exited(self, ended: asyncio.Event) -> None:
        """A command server's process ended by itself: the connection is over, and the
        process is started again (supervised): at once when it had answered a call, after
        the backoff when it had not (a crash loop slows down to one start per 30 s)."""
        if ended.is_set():
            return  # the gateway stopped it
        ended.set()
        if self._closed or ended is not self._ended:
            return
        if not self._answered:
            self._failed("the process exited before it answered a call")
        else:
            self._backoff, self._retry_at = RETRY_FIRST_S, 0.0
            log.warning("mcp upstream %s: the process exited; starting it again", self.server)
        self._respawn = asyncio.ensure_future(self._start_again())

    async def _start_again(self) -> None:
        await asyncio.sleep(max(self._retry_at - time.monotonic(), 0.0))
        try:
            await self.session()
        except UpstreamFailure as exc:  # the next call (or the next exit) tries again
            log.info("mcp upstream %s: not started again: %s", self.server, exc)

    async def _notified(self, message: IncomingMessage) -> None:
        """An upstream's list changed: drop that listing (the next one asks again)."""
        kinds = {
            types.ToolListChangedNotification: "tools",
            types.PromptListChangedNotification: "prompts",
            types.ResourceListChangedNotification: "resources",
        }
        for kind, name in kinds.items():
            if isinstance(message, kind):
                self._listings.pop(name, None)
                if name == "resources":
                    self._listings.pop("templates", None)

    async def _stop_task(self) -> None:
        task, self._task, self._client = self._task, None, None
        if task is None:
            return
        self._ended.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_S)
        except TimeoutError:
            task.cancel()

    async def aclose(self) -> None:
        self._closed = True
        if self._respawn is not None:
            self._respawn.cancel()
        await self._stop_task()

    # -- calls ----------------------------------------------------------------------

    async def request(self, request: Any, result: type[R]) -> R:
        """One request, its answer parsed by the SDK (``result`` its model); failures as
        ``UpstreamFailure``. A connection is awaited at most ``connect_timeout_s`` (when
        one must be opened), the answer at most ``timeout_s``."""
        session = await self.session()
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                answer = await session.send_request(request, result)
        except TimeoutError:
            text = f"upstream {self.server} did not answer within {self.limits.timeout_s:g}s"
            raise UpstreamFailure("timeout", text) from None
        except MCPError as exc:
            raise self._failure(exc) from None
        except ValidationError:
            kind = result.__name__
            text = f"upstream {self.server} answered without a {kind}"
            raise UpstreamFailure("error", text) from None
        self._answered = True
        return answer

    def _failure(self, exc: MCPError) -> UpstreamFailure:
        code, message = exc.error.code, exc.error.message
        if _too_large(message):
            return too_large(self.server, self.limits.max_result_bytes)
        if code == types.CONNECTION_CLOSED:
            self._ended.set()  # reconnect on the next call
            return UpstreamFailure(
                "closed", f"upstream {self.server} closed the connection mid-call"
            )
        return UpstreamFailure("error", message, code)

    # -- listings -------------------------------------------------------------------

    async def listing(self, kind: str) -> list[Any]:
        """The upstream's ``tools``, ``prompts``, ``resources`` or ``templates`` (every
        page), kept ``catalog_ttl_s``; empty when it does not offer that kind."""
        now = time.monotonic()
        held = self._listings.get(kind)
        if held is not None and now < held[0] and not held[1].cancelled():
            return await asyncio.shield(held[1])
        task = asyncio.ensure_future(self._list(kind))
        self._listings[kind] = (now + self.limits.catalog_ttl_s, task)
        try:
            return await asyncio.shield(task)
        except BaseException:
            if self._listings.get(kind, (0, None))[1] is task:
                del self._listings[kind]
            raise

    async def _list(self, kind: str) -> list[Any]:
        session = await self.session()
        caps = session.server_capabilities
        if caps is None:
            return []
        offered = {"tools": caps.tools, "prompts": caps.prompts}.get(kind, caps.resources)
        if offered is None:
            return []
        fetch: dict[str, Callable[[types.PaginatedRequestParams], Awaitable[Any]]] = {
            "tools": lambda p: session.list_tools(params=p),
            "prompts": lambda p: session.list_prompts(params=p),
            "resources": lambda p: session.list_resources(params=p),
            "templates": lambda p: session.list_resource_templates(params=p),
        }
        field = {"templates": "resource_templates"}.get(kind, kind)
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            try:
                async with asyncio.timeout(self.limits.timeout_s):
                    page = await fetch[kind](types.PaginatedRequestParams(cursor=cursor))
            except TimeoutError:
                text = f"upstream {self.server} did not list its {kind} in time"
                raise UpstreamFailure("timeout", text) from None
            except MCPError as exc:
                raise self._failure(exc) from None
            items.extend(getattr(page, field))
            cursor = page.next_cursor
            if cursor is None:
                break
        return items


def _reason(exc: BaseException) -> str:
    """One line for the log and the caller: the first leaf of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:300]
