"""The stdio upstream's line reader: messages split on newlines in any chunking, a line
over the limit skipped without being held, and its request answered with an error."""

from __future__ import annotations

import json
import time

import mcp_types as types
from mcp.shared.message import SessionMessage

from gateway.mcp.stdio import TOO_LARGE, LineReader


def response(request_id: int | str, text: str, *, id_last: bool = False) -> bytes:
    result = {"content": [{"type": "text", "text": text}]}
    body = (
        {"result": result, "jsonrpc": "2.0", "id": request_id}
        if id_last
        else {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": result,
        }
    )
    return json.dumps(body).encode() + b"\n"


def feed_in_chunks(reader: LineReader, data: bytes, size: int) -> list[object]:
    out: list[object] = []
    for start in range(0, len(data), size):
        out.extend(reader.feed(data[start : start + size]))
    return out


def test_messages_arrive_whole_however_the_bytes_are_cut() -> None:
    data = response(1, "one") + b"\n" + response(2, "two\nwith a newline in it")
    for size in (1, 7, 64, len(data)):
        got = feed_in_chunks(LineReader(1 << 20), data, size)
        assert [type(m) for m in got] == [SessionMessage, SessionMessage]
        assert [m.message.id for m in got] == [1, 2]  # type: ignore[attr-defined]


def test_an_oversized_answer_becomes_an_error_for_its_own_request() -> None:
    limit = 10_000
    for request_id, id_last in ((7, False), ("abc", True), (9, True)):
        data = response(5, "small") + response(request_id, "x" * 50_000, id_last=id_last)
        data += response(6, "after")
        got = feed_in_chunks(LineReader(limit), data, 4096)
        assert len(got) == 3
        first, big, after = (m.message for m in got)  # type: ignore[attr-defined]
        assert first.id == 5 and after.id == 6
        assert isinstance(big, types.JSONRPCError) and big.id == request_id
        assert TOO_LARGE in big.error.message and str(limit) in big.error.message


def test_fifty_megabytes_are_skipped_in_linear_time_and_bounded_memory() -> None:
    """The SDK's reader joins strings chunk by chunk (quadratic: 4 s of CPU for 10 MB
    here); this one skips 50 MB in 64 kB reads in well under a second's work."""
    line = response(3, "x" * (50 * 1024 * 1024))
    reader = LineReader(8 * 1024 * 1024)
    started = time.process_time()
    got = feed_in_chunks(reader, line, 65536)
    spent = time.process_time() - started
    assert isinstance(got[0].message, types.JSONRPCError)  # type: ignore[attr-defined]
    assert len(reader._line) == 0  # nothing of it is held
    assert spent < 5.0, spent
