"""The load of the fault suite: client tasks that keep asking through a fault and sort
every response (``Answer.kind``), and a count of the streams in flight (``Streams``) so a
fault can strike while some are running."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

# capped: a budget the load exceeds; roomy: spends freely; open: fails open, uncapped.
TENANTS = ("capped", "roomy", "open")
KEYS = {name: f"tg-{name}-fault-key-0123456789" for name in TENANTS}
HI = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Answer:
    replica: int
    tenant: str
    kind: str  # ok | error (JSON, any status) | stream_error (200, then an error event) |
    #            dropped (no response, or a stream cut without [DONE]) | bad (anything else)
    status: int
    code: str | None
    request_id: str | None
    ended: float  # time.time()
    detail: str = ""


def openai_error(body: Any) -> str | None:
    """The error's code (or type) if ``body`` is in OpenAI's error shape, else None."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return None
    error = body["error"]
    if not isinstance(error.get("message"), str) or not isinstance(error.get("type"), str):
        return None
    if "code" not in error or "param" not in error:
        return None
    return str(error["code"] or error["type"])


class Streams:
    """Engine streams (not cache replays) answered 200, per replica: a fault can wait for
    fresh ones to start, so it strikes while they are running."""

    def __init__(self) -> None:
        self.live: Counter[int] = Counter()
        self.started: Counter[int] = Counter()
        self._changed = asyncio.Condition()

    async def moved(self, replica: int, step: int) -> None:
        async with self._changed:
            self.live[replica] += step
            self.started[replica] += max(step, 0)
            self._changed.notify_all()

    async def wait(self, count: int, replica: int | None = None, timeout_s: float = 10.0) -> None:
        """Until ``count`` streams have started (on ``replica``) since the call: they have
        their first chunk and most of their answer still to come."""

        def started() -> int:
            return self.started.total() if replica is None else self.started[replica]

        base = started()
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: started() >= base + count),
                                   timeout_s)  # fmt: skip


async def _stream_kind(
    reply: httpx.Response, streams: Streams, replica: int
) -> tuple[str, str | None, str]:
    if not reply.headers.get("content-type", "").startswith("text/event-stream"):
        return "bad", None, f"200 stream as {reply.headers.get('content-type')}"
    error: str | None = None
    step = 0 if reply.headers.get("x-tiergate-cache") == "exact" else 1
    await streams.moved(replica, step)
    try:
        async for line in reply.aiter_lines():
            if line == "data: [DONE]":
                return ("stream_error", error, "") if error else ("ok", None, "")
            if line.startswith("data: ") and b'"error"' in line.encode():
                error = openai_error(orjson.loads(line[6:]))
                if error is None:
                    return "bad", None, line[:200]
    finally:
        await streams.moved(replica, -step)
    return "bad", error, "stream ended without [DONE]"


def request_body(tenant: str, prompt: str, stream: bool, max_tokens: int) -> dict[str, Any]:
    """``capped`` asks "hi" at the default temperature (never cached); the others ask
    ``prompt`` at temperature 0, so the exact cache serves repeats (and is read and written
    through every fault)."""
    body: dict[str, Any] = {"model": "small", "messages": HI, "max_tokens": max_tokens}
    if tenant != "capped":
        body.update(messages=[{"role": "user", "content": f"hi {prompt}"}], temperature=0)
    return {**body, "stream": stream}


async def one_request(
    http: httpx.AsyncClient, url: str, tenant: str, body: dict[str, Any], live: tuple[Streams, int]
) -> tuple[str, int, str | None, str | None, str]:
    stream = bool(body["stream"])
    headers = {"authorization": f"Bearer {KEYS[tenant]}"}
    try:
        async with http.stream("POST", url + "/v1/chat/completions", json=body,
                               headers=headers) as reply:  # fmt: skip
            rid = reply.headers.get("x-request-id")
            if reply.status_code == 200 and stream:
                kind, code, detail = await _stream_kind(reply, *live)
                return kind, 200, code, rid, detail
            raw = await reply.aread()
    except httpx.TimeoutException as exc:
        return "bad", 0, None, None, f"no answer in time: {exc!r}"
    except httpx.TransportError as exc:
        return "dropped", 0, None, None, repr(exc)
    json_type = reply.headers.get("content-type", "").startswith("application/json")
    parsed = orjson.loads(raw) if json_type else None
    if reply.status_code == 200:
        ok = isinstance(parsed, dict) and bool(parsed.get("choices"))
        return ("ok" if ok else "bad"), 200, None, rid, "" if ok else raw[:200].decode()
    code = openai_error(parsed)
    if code is None:
        return "bad", reply.status_code, None, rid, raw[:200].decode(errors="replace")
    return "error", reply.status_code, code, rid, ""


async def drive(
    urls: list[str],
    fault: Callable[[], Awaitable[None]],
    streams: Streams,
    *,
    after_s: float = 2.0,
    workers: int = 6,
    max_tokens: int = 8,
    pause_s: float = 0.05,
    repeat: bool = True,
) -> list[Answer]:
    """``workers`` client tasks (worker i: replica i mod n, tenant i mod 3, streaming every
    other request) from before ``fault`` starts until ``after_s`` after it returned;
    ``repeat`` False: no prompt repeats, so every request reaches the engine."""
    answers: list[Answer] = []
    done = asyncio.Event()

    async def worker(i: int, http: httpx.AsyncClient) -> None:
        replica, tenant, n = i % len(urls), TENANTS[i % len(TENANTS)], 0
        while not done.is_set():
            prompt = str(n % 4) if repeat else f"{i}.{n}"
            body = request_body(tenant, prompt, (i + n) % 2 == 0, max_tokens)
            result = await one_request(http, urls[replica], tenant, body, (streams, replica))
            kind, status, code, rid, detail = result
            answers.append(Answer(replica, tenant, kind, status, code, rid, time.time(), detail))
            n += 1
            await asyncio.sleep(pause_s if kind != "dropped" else 0.2)

    async def run_fault() -> None:
        try:
            await fault()
            await asyncio.sleep(after_s)
        finally:
            done.set()

    limits = httpx.Limits(max_connections=workers * 2, max_keepalive_connections=workers)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        await asyncio.gather(run_fault(), *(worker(i, http) for i in range(workers)))
    return answers
