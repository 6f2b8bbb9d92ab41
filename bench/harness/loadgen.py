"""The load generator: its own process, raw asyncio + httptools, keep-alive connections.

One phase per run; the spec comes as JSON on the command line and the summary goes to
stdout as JSON. Closed loop (``concurrency`` workers, each its own connection, back to
back) or open loop (``rate`` requests/s on a fixed schedule; latency counts from the
scheduled time, so a stalled server cannot hide its queue). For streams it records the
time to the first event and the largest gap between two body reads.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast

import httptools

TIMEOUT_S = 15.0
STAMP = re.compile(rb"@(\d+\.\d+)@")  # the upstream's send time, in streamed text


@dataclass(slots=True)
class Samples:
    latency: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)  # the largest gap of each stream
    # the largest gap of each stream beyond the one the upstream itself left (see STAMP)
    excess: list[float] = field(default_factory=list)
    timing: dict[str, list[float]] = field(default_factory=dict)  # Server-Timing, per stage
    ok: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)

    def fail(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1


class _Exchange(asyncio.Protocol):
    """One keep-alive connection; ``request`` sends the prebuilt bytes and awaits the end."""

    def __init__(self, end: bytes = b"data: [DONE]\n\n") -> None:
        self.end = end  # what a complete stream carries (chat's [DONE], Responses' completed)
        self.ended = False
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.first_body = 0.0
        self.last_body = 0.0
        self.max_gap = 0.0
        self.max_excess = 0.0
        self.prev_sent = self.prev_seen = 0.0
        self.tail = b""
        self.status = 0
        self.timing = b""
        self._header = b""
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.done is not None and not self.done.done():
                self.done.set_exception(exc)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"server-timing":
            self.timing = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        now = time.perf_counter()
        if not self.first_body:
            self.first_body = now
        elif now - self.last_body > self.max_gap:
            self.max_gap = now - self.last_body
        self.last_body = now
        window = self.tail + body
        self.ended = self.ended or self.end in window
        self.tail = window[-32:]
        if b"@" in body:
            seen = time.monotonic()
            for match in STAMP.finditer(body):
                sent = float(match.group(1))
                if self.prev_sent:
                    excess = (seen - self.prev_seen) - (sent - self.prev_sent)
                    self.max_excess = max(self.max_excess, excess)
                self.prev_sent, self.prev_seen = sent, seen

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def request(self, payload: bytes) -> None:
        assert self.transport is not None
        self.first_body = self.last_body = self.max_gap = self.max_excess = 0.0
        self.prev_sent = self.prev_seen = 0.0
        self.tail, self.status, self.timing, self.ended = b"", 0, b"", False
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        await asyncio.wait_for(self.done, TIMEOUT_S)


VOCABULARY = (
    "river cloud engine market garden theory window signal protein contract orbit ledger "
    "violin harbor cactus lantern glacier pixel tensor sonnet mortgage falcon quartz "
    "compiler saddle meteor pottery enzyme glacier tariff harvest kernel opera beacon"
).split()


def build_request(spec: dict[str, Any], n: int | None = None) -> bytes:
    """The request's bytes; with ``n`` the last message gains words unique to request n,
    so caches see distinct prompts (neither exact nor near-duplicate)."""
    payload = spec["body"]
    if n is not None:
        words, k = [], n * 2654435761 + 7
        for _ in range(10):
            words.append(VOCABULARY[k % len(VOCABULARY)])
            k //= len(VOCABULARY)
            k += n * 40503
        key = "messages" if "messages" in payload else "input"  # chat, or Responses
        messages = list(payload[key])
        last = messages[-1]
        messages[-1] = {**last, "content": f"{last['content']} Topic {n}: {' '.join(words)}."}
        payload = {**payload, key: messages}
    body = json.dumps(payload).encode()
    headers = [
        f"POST {spec['path']} HTTP/1.1",
        f"Host: {spec['host']}:{spec['port']}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if spec.get("api_key"):
        headers.append(f"Authorization: Bearer {spec['api_key']}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def _parse_timing(value: bytes, into: dict[str, list[float]]) -> None:
    for entry in value.decode("latin-1").split(","):
        name, _, rest = entry.strip().partition(";")
        for param in rest.split(";"):
            key, _, number = param.strip().partition("=")
            if key == "dur" and number:
                into.setdefault(name, []).append(float(number))


class Runner:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.payload = build_request(spec)
        self.vary = bool(spec.get("vary"))
        self.sent = 0
        self.stream = bool(spec["body"].get("stream"))
        self.samples = Samples()
        self.completed = 0  # every answered request, warmup included (for CPU per request)
        self.idle: list[_Exchange] = []
        self.open_connections = 0

    async def connect(self) -> _Exchange:
        loop = asyncio.get_running_loop()
        end = str(self.spec.get("stream_end", "data: [DONE]\n\n")).encode()
        _, exchange = await loop.create_connection(
            lambda: _Exchange(end), self.spec["host"], self.spec["port"]
        )
        self.open_connections += 1
        return exchange

    async def one(self, exchange: _Exchange, started: float, record: bool) -> bool:
        """One request; ``started`` is when it should have started. False: drop the connection."""
        payload = self.payload
        if self.vary:
            self.sent += 1
            payload = build_request(self.spec, self.sent + 1_000_000 * self.spec.get("seed", 0))
        try:
            await exchange.request(payload)
        except (ConnectionError, OSError, TimeoutError, httptools.HttpParserError) as exc:
            if record:
                self.samples.fail(type(exc).__name__)
            return False
        end = time.perf_counter()
        self.completed += 1
        if not record:
            return not exchange.lost
        s = self.samples
        if exchange.status != 200:
            s.fail(f"http {exchange.status}")
        elif self.stream and not exchange.ended:
            s.fail("stream without its end")
        else:
            s.ok += 1
            s.latency.append(end - started)
            if self.stream:
                s.ttfb.append(exchange.first_body - started)
                s.gaps.append(exchange.max_gap)
                s.excess.append(exchange.max_excess)
            if exchange.timing:
                _parse_timing(exchange.timing, s.timing)
        return not exchange.lost

    async def closed_loop(self, concurrency: int, duration: float, warmup: float) -> float:
        begin = time.perf_counter()
        measure_from = begin + warmup
        stop = measure_from + duration

        async def worker() -> None:
            exchange = await self.connect()
            while (now := time.perf_counter()) < stop:
                if not await self.one(exchange, now, record=now >= measure_from):
                    exchange.transport.close() if exchange.transport else None
                    exchange = await self.connect()
            if exchange.transport is not None:
                exchange.transport.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - measure_from

    async def open_loop(self, rate: float, duration: float, max_inflight: int) -> float:
        begin = time.perf_counter() + 0.05
        total = int(rate * duration)
        tasks: set[asyncio.Task[None]] = set()
        inflight = 0

        async def fire(at: float) -> None:
            nonlocal inflight
            inflight += 1
            try:
                exchange = self.idle.pop() if self.idle else await self.connect()
                if await self.one(exchange, at, record=True):
                    self.idle.append(exchange)
                elif exchange.transport is not None:
                    exchange.transport.close()
            except OSError as exc:
                self.samples.fail(type(exc).__name__)
            finally:
                inflight -= 1

        for i in range(total):
            at = begin + i / rate
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if inflight >= max_inflight:
                self.samples.fail("shed: too many in flight")
                continue
            task = asyncio.ensure_future(fire(at))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=TIMEOUT_S + 1)
        elapsed = time.perf_counter() - begin
        for exchange in self.idle:
            if exchange.transport is not None:
                exchange.transport.close()
        return elapsed


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def summarize(samples: Samples, elapsed: float, stall_s: float, completed: int) -> dict[str, Any]:
    ms = 1000.0
    out: dict[str, Any] = {
        "completed_total": completed,
        "ok": samples.ok,
        "errors": samples.errors,
        "error_kinds": samples.error_kinds,
        "elapsed_s": elapsed,
        "throughput": samples.ok / elapsed if elapsed > 0 else 0.0,
    }
    for name, values in (("latency", samples.latency), ("ttfb", samples.ttfb)):
        for q in (0.5, 0.9, 0.99):
            value = _quantile(values, q)
            out[f"{name}_p{int(q * 100)}_ms"] = None if value is None else value * ms
    if samples.gaps:
        out["max_gap_ms"] = max(samples.gaps) * ms
        out["gap_p99_ms"] = (_quantile(samples.gaps, 0.99) or 0.0) * ms
    if samples.excess:
        out["max_excess_gap_ms"] = max(samples.excess) * ms
        out["stalls"] = sum(1 for g in samples.excess if g > stall_s)
    out["timing_p50_ms"] = {k: _quantile(v, 0.5) for k, v in samples.timing.items()}
    return out


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    runner = Runner(spec)
    if spec.get("rate"):
        elapsed = await runner.open_loop(spec["rate"], spec["duration"], spec["max_inflight"])
    else:
        elapsed = await runner.closed_loop(spec["concurrency"], spec["duration"], spec["warmup"])
    return summarize(runner.samples, elapsed, spec.get("stall_s", 0.1), runner.completed)


def main() -> None:
    import uvloop

    spec = json.loads(sys.argv[1])
    print(json.dumps(uvloop.run(run(spec))), flush=True)


if __name__ == "__main__":
    main()
