"""The fault suite on real servers: each scenario starts its own Redis and two gateway
replicas (``python -m gateway serve``) sharing it, drives load from six client tasks
across three tenants, injects one fault mid-load, recovers, and then asserts:

1. every response is a 200 or a JSON error in OpenAI's shape (a stream may end in an
   error event, then ``[DONE]``); connections dropped without an answer are only allowed
   from a replica that was itself SIGKILLed, while it was down, and are counted;
2. settled spend never passes a budget (the ``capped`` tenant's is sized for ~25 answers);
3. the ledger equals the budget counters (events, day aggregate and global scope), once
   every replica's settle journal has drained; and every answered request is in it;
4. no hold is left once the reservation TTL has passed.

Redis killed and restarted loses everything it held (no persistence, as in the tests):
there "ledger = counters" means the new Redis's ledger equals its counters, every answer
that ended after the kill is in it (the journal replays the settles the outage refused),
and its spend stays within the budget plus what was replayed into it (spend the dead
Redis had counted is gone; that is the price of running Redis without persistence).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from tests.gateway.fault_fleet import (
    Fleet,
    Process,
    Verdict,
    fleet_config,
    upstream_process,
    verdict,
)
from tests.gateway.fault_load import KEYS, Answer, Streams, drive

pytestmark = pytest.mark.slow

TTL_S = 2.0
SMALL_COST = 8 * 0.2 / 1e6  # the fake answers 8 tokens; input is free here
PAUSE_WINDOWS = 5


@dataclass
class Marks:
    """What a fault did, when (``time.time()``)."""

    fault: float = 0.0
    recovered: float = 0.0
    killed_replica: int | None = None
    sockets: list[socket.socket] = field(default_factory=list)
    stalled_ids: list[str] = field(default_factory=list)
    stalled_freed_s: float | None = None  # until every stalled stream was cut and charged
    windows: int = 0  # Redis fault windows (pause, OOM) it took to defer a settle


@dataclass
class Rig:
    fleet: Fleet
    upstream: Process | None
    marks: Marks
    streams: Streams


Fault = Callable[[Rig], Awaitable[None]]


def _now() -> float:
    return time.time()


async def maxmemory_noeviction(rig: Rig) -> None:
    """Redis filled to its limit in 2 s windows: every write gets OOM, so a settle in a
    window is journaled; a reserve gets OOM too, so a window defers a settle only if some
    request was admitted before it opened (a race with the host's load). Windows repeat,
    with a second of room between them to admit requests, until a replica has logged a
    deferred settle, at most ``PAUSE_WINDOWS`` of them."""
    await asyncio.sleep(1.0)
    admin = redis.Redis(port=rig.fleet.redis.port)
    for window in range(PAUSE_WINDOWS):
        if window:
            await asyncio.sleep(1.0)
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", used + 256 * 1024)
        for i in range(1000):  # fill to the limit: every write now gets OOM
            try:
                admin.set(f"fill:{i}", b"x" * 65_536)
            except redis.ResponseError:
                break
        rig.marks.windows = window + 1
        if not window:
            rig.marks.fault = _now()
        await asyncio.sleep(2.0)
        admin.config_set("maxmemory", 0)
        admin.delete(*admin.keys("fill:*"))
        if await asyncio.to_thread(rig.fleet.journaled):
            break
    admin.close()
    rig.marks.recovered = _now()


def client_pause(mode: str) -> Fault:
    """Redis paused in 2 s windows: a settle sent in a window's first second times out
    (``redis_timeout_s`` 1.0) and is journaled. Whether a request is between its reserve
    and its settle when a window opens is a race with the host's load, so windows follow
    back to back (the requests one window held run, then settle in the next) until a
    replica has logged a deferred settle, at most ``PAUSE_WINDOWS`` of them."""

    async def pause(rig: Rig) -> None:
        await asyncio.sleep(1.0)
        admin = redis.Redis(port=rig.fleet.redis.port)
        for window in range(PAUSE_WINDOWS):
            admin.execute_command("CLIENT", "PAUSE", 2000, mode)
            rig.marks.windows = window + 1
            if not window:
                rig.marks.fault = _now()
            await asyncio.sleep(2.0)
            if await asyncio.to_thread(rig.fleet.journaled):
                break
        admin.close()
        rig.marks.recovered = _now()

    return pause


async def redis_killed(rig: Rig) -> None:
    await asyncio.sleep(1.0)
    rig.marks.fault = _now()
    await asyncio.to_thread(rig.fleet.redis.kill)
    await asyncio.sleep(1.0)
    await asyncio.to_thread(rig.fleet.redis.start)  # same port, empty
    rig.marks.recovered = _now()


async def replica_killed(rig: Rig) -> None:
    await asyncio.sleep(1.0)
    await rig.streams.wait(2, replica=0)  # slow streams (1.2 s each) are in flight
    rig.fleet.replicas[0].kill()
    rig.marks.killed_replica = 0
    rig.marks.fault = _now()
    await asyncio.sleep(1.0)
    await asyncio.to_thread(rig.fleet.replicas[0].start)  # and adopts its journal, if any
    rig.marks.recovered = _now()


async def engine_crash(rig: Rig) -> None:
    assert rig.upstream is not None
    await asyncio.sleep(1.0)
    await rig.streams.wait(2)  # some streams are in flight: they end in an error event
    rig.upstream.kill()
    rig.marks.fault = _now()
    await asyncio.sleep(1.0)
    await asyncio.to_thread(rig.upstream.start)
    rig.marks.recovered = _now()


def _stall(url: str) -> tuple[socket.socket, str]:
    """A stream request for 60,000 tokens whose reader takes the headers, then never
    reads again (a 4 kB receive buffer, so the server's writes soon block)."""
    body = orjson.dumps({"model": "medium", "messages": [{"role": "user", "content": "hi"}],
                         "stream": True, "max_tokens": 60_000})  # fmt: skip
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = url.removeprefix("http://").split(":")
    sock.connect((host, int(port)))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + KEYS["roomy"].encode() + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    head = sock.recv(1024).split(b"\r\n\r\n")[0].decode()
    assert head.startswith("HTTP/1.1 200"), head
    (rid,) = [line.split(":", 1)[1].strip() for line in head.split("\r\n")
              if line.lower().startswith("x-request-id:")]  # fmt: skip
    return sock, rid


async def readers_stop_reading(rig: Rig) -> None:
    await asyncio.sleep(1.0)
    for url in rig.fleet.urls * 2:
        sock, rid = await asyncio.to_thread(_stall, url)
        rig.marks.sockets.append(sock)
        rig.marks.stalled_ids.append(rid)
    rig.marks.fault = _now()
    rig.marks.recovered = _now()  # the others are served throughout
    # The sockets stay open and unread: only the write timeout can end these streams (the
    # hold's keep-alive would keep it forever otherwise), so their charge is the proof.
    waiting = set(rig.marks.stalled_ids)
    while waiting and _now() - rig.marks.fault < 10:
        await asyncio.sleep(0.2)
        events = await asyncio.to_thread(rig.fleet.probe.events)
        waiting -= {e.request_id for e in events}
    if not waiting:
        rig.marks.stalled_freed_s = _now() - rig.marks.fault


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: Fault
    token_delay_s: float = 0.02
    upstream: bool = False
    max_tokens: int = 8
    store_fault: bool = False  # Redis refuses writes for a while: some settles are journaled
    repeat: bool = True  # False: no cache hits, every request reaches the engine


SCENARIOS = [
    Scenario("maxmemory_noeviction", maxmemory_noeviction, store_fault=True),
    Scenario("client_pause_all", client_pause("ALL"), store_fault=True),
    Scenario("client_pause_write", client_pause("WRITE"), store_fault=True),
    Scenario("redis_killed_restarted", redis_killed, store_fault=True),
    Scenario("replica_sigkilled_mid_stream", replica_killed, token_delay_s=0.15),
    Scenario("engine_crash", engine_crash, upstream=True, max_tokens=32, repeat=False),
    Scenario("client_stops_reading", readers_stop_reading),
]


@contextmanager
def rig_for(scenario: Scenario, tmp: Path) -> Iterator[Rig]:
    upstream = upstream_process(tmp) if scenario.upstream else None
    raw = fleet_config(
        ttl_s=TTL_S,
        capped_usd=25 * (SMALL_COST if upstream is None else 32 * 0.2 / 1e6),
        token_delay_s=scenario.token_delay_s,
        upstream=None if upstream is None else upstream.ready_url,
    )
    fleet = Fleet(tmp, raw)
    rig = Rig(fleet, upstream, Marks(), Streams())
    try:
        if upstream is not None:
            upstream.start()
        fleet.start()
        yield rig
    finally:
        for sock in rig.marks.sockets:
            sock.close()
        fleet.stop()
        if upstream is not None:
            upstream.stop()


def _may_drop(answer: Answer, marks: Marks) -> bool:
    """Only a SIGKILLed replica's clients lose their answer, from the kill until it is back."""
    return answer.replica == marks.killed_replica and marks.fault <= answer.ended <= (
        marks.recovered + 0.5
    )


def _row(
    scenario: Scenario, answers: list[Answer], v: Verdict, marks: Marks, journaled: int
) -> str:
    kinds = Counter(a.kind for a in answers)
    codes = Counter(f"{a.status}:{a.code}" for a in answers if a.code)
    during = sum(1 for a in answers if marks.fault <= a.ended <= marks.recovered)
    return (
        f"| {scenario.name} | 2 | {len(answers)} ({during} during) | {kinds['ok']} | "
        f"{kinds['error'] + kinds['stream_error']} ({kinds['stream_error']} in-stream) | "
        f"{kinds['dropped']} | {journaled} | {v.spent['capped']:.3g} / {v.limits['capped']:.3g} | "
        f"{v.ledger_gap():.1g} | {v.holds} | {dict(codes)} |"
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_fault_under_load(scenario: Scenario, tmp_path: Path) -> None:
    started = time.monotonic()
    with rig_for(scenario, tmp_path) as rig:
        marks = rig.marks

        async def fault() -> None:
            await scenario.fault(rig)

        load = drive(
            rig.fleet.urls, fault, rig.streams, max_tokens=scenario.max_tokens,
            repeat=scenario.repeat,
        )  # fmt: skip
        answers = asyncio.run(load)
        killed_redis = scenario.fault is redis_killed
        # Redis lost what it had: an answer must be in the new ledger if it ended after the
        # kill, plus the half second a loaded client may take to read an answer settled
        # into the old Redis just before it.
        v = verdict(rig.fleet, answers, since=marks.fault + 0.5 if killed_redis else 0.0)
        journaled = rig.fleet.journaled()
        seconds = time.monotonic() - started
        print(f"\n{_row(scenario, answers, v, marks, len(journaled))} {seconds:.1f}s")
        if marks.windows:
            print(f"{marks.windows} Redis fault window(s) until a settle was deferred")
        if marks.stalled_ids:
            print(f"{len(marks.stalled_ids)} stalled streams cut and charged "
                  f"{marks.stalled_freed_s}s after they stopped reading")  # fmt: skip
        # 1. a 200 or a JSON error, always; drops only from a killed replica while down
        bad = [a for a in answers if a.kind == "bad"]
        assert not bad, bad[:5]
        dropped = [a for a in answers if a.kind == "dropped" and not _may_drop(a, marks)]
        assert not dropped, dropped[:5]
        assert not [a for a in answers if a.status == 500], "an internal error reached a client"
        assert marks.fault > 0, "the fault never happened"
        kinds = Counter(a.kind for a in answers)
        if scenario.fault is replica_killed:
            assert kinds["dropped"], "the kill cut no connection"
        if scenario.fault is engine_crash:
            assert kinds["stream_error"], "no stream was cut by the crash"
        served_after = [a for a in answers if a.kind == "ok" and a.ended > marks.recovered + 0.5]
        assert served_after, "the fleet did not recover"
        # 2. settled spend within every budget
        replayed = sum(e.cost_usd for e in v.events if e.ts < marks.recovered)
        slack = replayed if killed_redis else 0.0
        for tenant, limit in v.limits.items():
            if limit is not None:
                assert v.spent[tenant] <= limit + slack + 1e-12, (tenant, v.spent, slack)
        # 3. ledger = counters, and every answer is charged
        assert v.journal_files == 0
        if scenario.store_fault:  # the settles it refused went through the journal
            assert journaled, "no settle was deferred: the fault missed the settle path"
        assert v.ledger_gap() <= 1e-12, v
        assert not v.unrecorded, v.unrecorded[:5]
        ledger_ids = {e.request_id for e in v.events}
        assert set(journaled) <= ledger_ids, "a journaled settle never reached the ledger"
        if marks.stalled_ids:  # cut by the 1 s write timeout, long before the run ended
            assert marks.stalled_freed_s is not None and marks.stalled_freed_s < 5
        # 4. no hold once the TTL has passed
        assert v.holds == 0 and v.held_usd == 0.0, v


def test_a_stream_is_charged_before_its_done_so_a_kill_right_after_loses_nothing(
    tmp_path: Path,
) -> None:
    """Redis pauses writes mid-stream, so the settle waits (then is journaled); the replica
    is SIGKILLed the moment the client has ``[DONE]``. The answer must still be charged:
    the settle came before ``[DONE]`` and the restarted replica replays its journal.
    (Settled after the stream's end, as before, this answer was never charged.)"""
    fleet = Fleet(tmp_path, fleet_config(ttl_s=TTL_S, capped_usd=1.0, token_delay_s=0.05), 1)
    fleet.start()
    try:
        admin = redis.Redis(port=fleet.redis.port)
        body = {"model": "small", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8, "stream": True}  # fmt: skip
        headers = {"authorization": f"Bearer {KEYS['capped']}"}
        url = fleet.urls[0] + "/v1/chat/completions"
        with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as reply:
            request_id = reply.headers["x-request-id"]
            lines = reply.iter_lines()
            assert next(lines).startswith("data: ")  # running: now Redis refuses writes
            admin.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
            assert [line for line in lines if line][-1] == "data: [DONE]"
            fleet.replicas[0].kill()
        admin.close()
        time.sleep(3.0)  # the pause ends
        fleet.replicas[0].start()  # adopts its journal and replays it
        v = verdict(fleet, [])
        (event,) = [e for e in v.events if e.request_id == request_id]
        assert event.cost_usd == pytest.approx(SMALL_COST)
        assert v.spent["capped"] == pytest.approx(SMALL_COST)
        assert v.ledger_gap() <= 1e-12 and v.holds == 0
    finally:
        fleet.stop()
