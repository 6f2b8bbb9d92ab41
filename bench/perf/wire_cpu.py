"""CPU of the wire-format edges alone, in process: parsing and translating one request,
and rendering one streamed answer to SSE frames, per wire format, next to chat.

    python -m bench.perf.wire_cpu [--chunks 32] [--rounds 7]

The rest of a request's path (auth, routing, the run, the engine) is the same code for
every format; this isolates what differs, so the ratios hold on a busy machine where
``bench/perf/overhead.py --wire-only`` is noisy (CPU time, not wall time; the median of
``--rounds``, and the range).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from backends.base import Chunk, Usage
from gateway.chat import render as chat_render
from gateway.chat.protocol import ChatCompletionRequest
from gateway.chat.protocol import to_generation as chat_generation
from gateway.messages import render as messages_output
from gateway.messages.protocol import MessagesRequest
from gateway.messages.translate import to_generation as messages_generation
from gateway.responses import render as responses_output
from gateway.responses.protocol import CreateResponse
from gateway.responses.translate import to_generation as responses_generation
from gateway.wire.common import parse_body
from gateway.wire.sse import OPENAI_SSE, Framing, named_events, sse

MESSAGES = [  # bench/perf/overhead.py's request
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Summarise the benefits of connection pooling in two lines."},
]
BODIES = {
    "chat": {"model": "m", "messages": MESSAGES, "stream": True},
    "responses": {"model": "m", "input": MESSAGES, "stream": True, "store": False},
    "messages": {"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": 64},
}


class View:
    request_id, created, model, include_usage = "id_1", 0, "m", True


def _parse(api: str) -> Callable[[], object]:
    raw = orjson.dumps(BODIES[api])
    if api == "chat":
        return lambda: chat_generation(parse_body(ChatCompletionRequest, raw))
    if api == "responses":
        return lambda: responses_generation(parse_body(CreateResponse, raw)).compat.headers()
    return lambda: messages_generation(parse_body(MessagesRequest, raw)).compat.headers()


def _renderer(api: str) -> tuple[Callable[[AsyncIterator[Chunk]], AsyncIterator[Any]], Framing]:
    if api == "chat":
        return (lambda chunks: chat_render.events(View(), chunks)), OPENAI_SSE
    if api == "messages":
        return (lambda chunks: messages_output.events(View(), chunks)), messages_output.FRAMING

    def responses(chunks: AsyncIterator[Chunk]) -> AsyncIterator[Any]:
        echo = responses_output.Echo("resp_1", "m", {})
        return responses_output.ResponseEvents(echo).events(chunks)

    return responses, named_events(lambda error: [])


async def _stream(api: str, chunks: int) -> int:
    async def source() -> AsyncIterator[Chunk]:
        for i in range(chunks):
            yield Chunk(text=f" word{i}")
        yield Chunk(finish_reason="stop", usage=Usage(20, chunks))

    events, framing = _renderer(api)
    return sum([len(f) async for f in sse(events(source()), "id_1", None, framing)])


def _cpu_us(work: Callable[[], object], repeat: int, rounds: int) -> list[float]:
    runs = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(repeat):
            work()
        runs.append((time.process_time() - started) / repeat * 1e6)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=32, help="text chunks per stream")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    loop = asyncio.new_event_loop()
    rows: dict[str, dict[str, list[float]]] = {}
    for api in BODIES:
        stream = lambda api=api: loop.run_until_complete(_stream(api, args.chunks))  # noqa: E731
        rows[api] = {
            "parse + translate": _cpu_us(_parse(api), 3000, args.rounds),
            f"render a {args.chunks}-chunk stream": _cpu_us(stream, 200, args.rounds),
        }
    loop.close()
    print("| step | format | CPU us (median [range]) | vs chat |")
    print("|---|---|---|---|")
    for step in rows["chat"]:
        base = statistics.median(rows["chat"][step])
        for api, steps in rows.items():
            runs = steps[step]
            median = statistics.median(runs)
            print(
                f"| {step} | {api} | {median:.1f} [{min(runs):.1f}..{max(runs):.1f}] "
                f"| {median / base:.2f}x |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
