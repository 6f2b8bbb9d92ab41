"""A ``command:`` upstream: the gateway's child process, spoken to over stdio, with each
message line bounded in size.

The SDK's ``stdio_client`` keeps a partial line as a string it extends chunk by chunk
(``buffer + chunk``): quadratic in the line's length, on the event loop (a 10 MB answer
took 4 s of CPU here, a 50 MB one would stall the gateway for minutes). This transport
reads bytes into one buffer instead and stops buffering a line at ``max_line_bytes``: the
rest is skipped, and the request it answered (its id, read from the line's head or tail)
gets an error naming the limit. Lines are parsed with the SDK's own JSON-RPC message
model, and the yielded streams are what every SDK transport yields, so the SDK's
``ClientSession`` runs on it unchanged. The process gets the SDK's safe default
environment (``HOME``, ``PATH``…) plus the server's settings and credential, not the
gateway's own variables; it runs in its own process group, which is ended as a whole.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress

import anyio
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger(__name__)

TOO_LARGE = "tiergate: the upstream's answer is larger than"
EXIT_GRACE_S = 2.0  # after stdin closes, before SIGTERM (and as long again before SIGKILL)
_ID = r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")'
_HEAD_ID = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?' + _ID.encode())
_TAIL_ID = re.compile(_ID.encode() + rb"\s*\}\s*$")
_EDGE = 512  # bytes kept of an oversized line's head and tail, to find its id

Incoming = SessionMessage | Exception


def _parse(line: bytes) -> Incoming:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValidationError as exc:
        return exc


def oversized(head: bytes, tail: bytes, limit: int) -> Incoming:
    """The error answer to an oversized line, addressed to the request it answered: its
    id is the first member (as the Python SDK writes) or the last (the TypeScript SDK)."""
    found = _HEAD_ID.search(head) or _TAIL_ID.search(tail.rstrip(b"\r"))
    if found is None:
        return ValueError(f"{TOO_LARGE} {limit} bytes (a message without a readable id)")
    raw = found.group(1).decode()
    request_id: str | int = raw[1:-1] if raw.startswith('"') else int(raw)
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"{TOO_LARGE} {limit} bytes")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


class LineReader:
    """Newline-delimited messages from a byte stream, each at most ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._line = bytearray()
        self._skipping = False
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> list[Incoming]:
        """The messages ``chunk`` completes (linear in its length)."""
        out: list[Incoming] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            self._take(chunk[start : len(chunk) if end < 0 else end])
            if end < 0:
                return out
            message = self._finish()
            if message is not None:
                out.append(message)
            start = end + 1

    def _take(self, piece: bytes) -> None:
        if self._skipping:
            self._tail = (self._tail + piece[-_EDGE:])[-_EDGE:]
        elif len(self._line) + len(piece) > self.limit:
            self._skipping = True
            self._head = bytes(self._line[:_EDGE]) + piece[: max(_EDGE - len(self._line), 0)]
            self._tail = piece[-_EDGE:]
            self._line.clear()
        else:
            self._line += piece

    def _finish(self) -> Incoming | None:
        if self._skipping:
            self._skipping = False
            return oversized(self._head, self._tail, self.limit)
        line, self._line = bytes(self._line), bytearray()
        return _parse(line) if line.strip() else None


async def _pump_out(
    stdout: ByteReceiveStream,
    sink: MemoryObjectSendStream[Incoming],
    limit: int,
    on_eof: Callable[[], None],
) -> None:
    reader = LineReader(limit)
    async with sink:
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in stdout:
                for message in reader.feed(chunk):
                    await sink.send(message)
    on_eof()  # the process closed its stdout: it exited, or is about to


async def _pump_in(process: Process, source: MemoryObjectReceiveStream[SessionMessage]) -> None:
    assert process.stdin is not None
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async with source:
            async for item in source:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(data.encode() + b"\n")


async def _stop(process: Process) -> None:
    """Close stdin, give the process ``EXIT_GRACE_S`` to leave, then end its group."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE_S):
        await process.wait()
    if process.returncode is None:
        await terminate_posix_process_tree(process, EXIT_GRACE_S)
        with anyio.move_on_after(EXIT_GRACE_S):
            await process.wait()


@asynccontextmanager
async def stdio_transport(
    argv: tuple[str, ...],
    env: Mapping[str, str],
    cwd: str | None,
    max_line_bytes: int,
    on_eof: Callable[[], None],
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[Incoming], MemoryObjectSendStream[SessionMessage]]
]:
    """Start ``argv`` and yield the SDK's (read, write) stream pair to it; ``on_eof`` is
    called when its stdout ends. On exit the process is stopped (shielded: a cancelled
    caller never leaves it running)."""
    process = await anyio.open_process(
        list(argv),
        env={**get_default_environment(), **env},
        cwd=cwd,
        stderr=sys.stderr,
        start_new_session=True,
    )
    assert process.stdout is not None
    to_session, read_stream = anyio.create_memory_object_stream[Incoming](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_pump_out, process.stdout, to_session, max_line_bytes, on_eof)
            tasks.start_soon(_pump_in, process, from_session)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (read_stream, write_stream, to_session, from_session):
                await stream.aclose()
            log.debug("upstream process %s ended (%s)", argv[0], process.returncode)
