"""The batch runner: a task of every gateway process that runs batch lines from the
shared queue, whichever replica took the batch.

Each replica reads new lines (up to ``batches.concurrency`` at once), beats for the ones
it holds every third of ``claim_idle_s``, and claims the lines a silent replica held
(it died) once they have been idle that long. A line is acknowledged only after its
result is written (once: ``BatchStore.finish``); a replica that dies before that leaves
it to another, which runs it under the same request id (charged once by the budget
store). The replica whose line was a batch's last finishes the batch; a sweep every
``sweep_s`` finishes what a dead replica left, fails a batch whose intake died, queues
again lines a dead intake never queued, and removes what has expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.batches.files import Files
from gateway.batches.finish import finalize
from gateway.batches.lines import answer
from gateway.batches.protocol import input_of
from gateway.batches.results import (
    Answered,
    LineMoney,
    Refused,
    refused_line,
    skipped_line,
    succeeded_line,
)
from gateway.core.serving_core import ServingCore
from gateway.errors import (
    ApiError,
    InsufficientQuota,
    InvalidApiKey,
    Overloaded,
    RateLimited,
    ServiceUnavailable,
)
from gateway.telemetry.tracing import Tracing, active
from gateway.wire.format import WireFormat
from policies.batches_spec import BatchesConfig
from policies.stores.batch_queue import QueuedLine
from policies.stores.batch_records import (
    CANCELLING,
    FAILED,
    FINALIZING,
    IN_PROGRESS,
    LINE_COUNTS,
    VALIDATING,
    BatchRecord,
    LineResult,
    line_action,
)
from policies.stores.key_directory import KeyDirectory
from policies.stores.store import StoreUnavailable
from policies.tenants import Principal

log = logging.getLogger(__name__)

MAX_WAIT_S = 30.0


class GiveUp(Exception):
    """Leave the line unacknowledged: another try (here or elsewhere) after claiming."""


class BatchRunner:
    def __init__(
        self,
        core: Callable[[], ServingCore],
        formats: Mapping[str, WireFormat[Any]],
        keys: KeyDirectory,
        tracing: Tracing,
    ) -> None:
        self.core = core  # the running snapshot, read again for every line
        self.formats = formats  # path -> the format its family serves it in (the app's)
        self.keys = keys
        self.tracing = tracing
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        self.held: dict[str, QueuedLine] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._room = asyncio.Event()
        self._claimed_at = 0.0  # claims (and the queue's gauge) at most once a second

    def files(self, core: ServingCore) -> Files:
        return Files(core.config.batches, core.parts.batches, core.parts.bucket)

    async def run(self) -> None:
        """Until cancelled (the lifespan's task); then drains for ``drain_s``."""
        helpers = [asyncio.create_task(self._beat()), asyncio.create_task(self._sweeps())]
        try:
            while True:
                try:
                    await self._step()
                except Exception:  # a bug must not stop every replica's batches for good
                    log.exception("the batch runner's step failed")
                    await asyncio.sleep(self.core().config.batches.poll_s)
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self._drain()

    async def _step(self) -> None:
        core = self.core()
        spec = core.config.batches
        store = core.parts.batches
        free = spec.concurrency - len(self.held) if spec.enabled else 0
        taken: list[QueuedLine] = []
        if free > 0:
            try:
                if time.monotonic() - self._claimed_at >= 1.0:
                    self._claimed_at = time.monotonic()
                    claimed = await store.queue.claim(self.consumer, spec.claim_idle_s, free)
                    # A line of our own whose beat came late is still running here.
                    taken = [line for line in claimed if line.entry not in self.held]
                    core.parts.metrics.batch_queued.set(await store.queue.queued())
                if free > len(taken):
                    taken += await store.queue.read(self.consumer, free - len(taken))
            except StoreUnavailable as exc:
                log.warning("batch queue unreachable: %s", exc)
        for line in taken:
            self._start(line)
        core.parts.metrics.batch_running.set(len(self.held))
        if not taken or len(self.held) >= spec.concurrency:
            self._room.clear()
            # Not ``wait_for``: on 3.11 it can swallow the shutdown's cancellation when it
            # arrives with the wake-up, and this loop would run on (as in backends/pool.py).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(spec.poll_s):
                    await self._room.wait()

    def _start(self, line: QueuedLine) -> None:
        self.held[line.entry] = line
        task = asyncio.create_task(self._line(line))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _line(self, line: QueuedLine) -> None:
        try:
            await self._work(line)
        except (GiveUp, StoreUnavailable) as exc:
            log.warning("batch line %s/%s:%d left for later: %s", *_where(line), exc)
        except Exception:  # a bug must not stop the runner; the line is claimed again later
            log.exception("batch line %s/%s:%d failed", *_where(line))
        finally:
            self.held.pop(line.entry, None)
            self._room.set()

    async def _work(self, line: QueuedLine) -> None:
        core = self.core()
        store = core.parts.batches
        take = await store.take(line.tenant, line.batch_id, line.index, int(time.time()))
        record = take.batch
        if take.action in ("done", "gone") or record is None:
            await store.queue.ack([line.entry])
            return
        custom_id, body = input_of(take.line)
        if take.action == "run":
            result = await self._run(record, line.index, custom_id, body)
        else:
            result = skipped_line(record, line.index, custom_id, take.action)
        _, done = await store.finish(line.tenant, line.batch_id, line.index, result)
        await store.queue.ack([line.entry])
        core.parts.metrics.batch_line_ended(LINE_COUNTS[result.kind])
        if done:
            current = await store.batch(line.tenant, line.batch_id)
            if current is not None:
                await finalize(self.files(core), core.config.batches, current, int(time.time()))

    async def _run(
        self, record: BatchRecord, index: int, custom_id: str, body: bytes
    ) -> LineResult:
        """The line's result, trying again what is worth another try."""
        principal = await self.keys.by_digest(record.key_digest)
        if principal is None or principal.tenant != record.tenant:
            error = InvalidApiKey("the API key that created this batch is no longer valid")
            return refused_line(record, index, custom_id, Refused(error, None, LineMoney()))
        seed = f"{record.tenant}/{record.id}/{index}"
        attempt = 0
        while True:
            core = self.core()
            spec = core.config.batches
            try:
                answered = await self._traced(core, record, principal, body, seed)
                return succeeded_line(record, index, custom_id, answered)
            except Refused as exc:
                if not retryable(exc.error):
                    return refused_line(record, index, custom_id, exc)
                # Busy engines, a rate limit, holds in flight: waited out until it expires.
                patient = isinstance(exc.error, Overloaded | RateLimited) or waits_for_holds(
                    exc.error
                )
                attempt += 0 if patient else 1
                if attempt >= spec.max_attempts or time.time() >= record.expires_at:
                    return refused_line(record, index, custom_id, exc)
                await asyncio.sleep(_wait(spec, attempt, exc))
                # Cancelled (or expired) while it waited: it ends as such, unrun.
                current = await core.parts.batches.batch(record.tenant, record.id)
                action = "cancel" if current is None else line_action(current, int(time.time()))
                if action != "run":
                    return skipped_line(record, index, custom_id, action)
            except StoreUnavailable as exc:
                attempt += 1
                if attempt >= spec.max_attempts:
                    raise GiveUp(str(exc)) from exc
                await asyncio.sleep(_wait(spec, attempt, None))

    async def _traced(
        self, core: ServingCore, record: BatchRecord, principal: Principal, body: bytes, seed: str
    ) -> Answered:
        attributes = {
            "tiergate.tenant": record.tenant,
            "tiergate.batch": record.id,
            "tiergate.priority": "batch",
            "url.path": record.endpoint,
        }
        trace = self.tracing.begin_job("batch_line", attributes)
        try:
            with active(trace):
                answered = await answer(core, self.formats, principal, record.endpoint, body, seed)
        except Refused as exc:
            trace.end(exc.error.status, exc.error.code or exc.error.type)
            raise
        except BaseException as exc:
            trace.end(500, type(exc).__name__)
            raise
        trace.end(200)
        return answered

    async def _beat(self) -> None:
        """Keep the lines this replica holds its own (``claim_idle_s`` / 3)."""
        while True:
            core = self.core()
            await asyncio.sleep(core.config.batches.claim_idle_s / 3)
            try:
                await core.parts.batches.queue.touch(self.consumer, list(self.held))
            except StoreUnavailable as exc:
                log.warning("could not beat for batch lines: %s", exc)

    async def _sweeps(self) -> None:
        while True:
            core = self.core()
            try:
                await sweep(self.files(core), core.config.batches, int(time.time()))
            except StoreUnavailable as exc:
                log.warning("batch sweep: %s", exc)
            await asyncio.sleep(core.config.batches.sweep_s)

    async def _drain(self) -> None:
        spec = self.core().config.batches
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=spec.drain_s)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def sweep(files: Files, spec: BatchesConfig, now: int) -> None:
    """Finish, fail or queue what a dead replica (or a store that lost the queue) left;
    remove what has expired."""
    store = files.store
    generation = await store.queue.generation()
    for tenant, batch_id in await store.open_batches():
        record = await store.batch(tenant, batch_id)
        if record is not None:
            await tend(files, spec, record, now, generation)
    for tenant, kind, item in await store.due(now):
        if kind == "file":
            await files.remove(tenant, item)
        else:
            await store.remove_batch(tenant, item)


async def tend(
    files: Files, spec: BatchesConfig, record: BatchRecord, now: int, generation: int = 1
) -> None:
    """One open batch, as the sweep finds it (``generation``: the queue's now)."""
    store, stale = files.store, now - spec.claim_idle_s
    tenant, batch_id, status = record.tenant, record.id, record.status
    if status == VALIDATING and record.created_at < stale:
        error = {"code": "validation_interrupted", "message": "the intake stopped half-way"}
        errors = orjson.dumps([error]).decode()
        keep = spec.result_ttl_s
        await store.move(tenant, batch_id, [VALIDATING], FAILED, now, {"errors": errors}, keep)
        await store.drop_lines(tenant, batch_id)
    elif status in (IN_PROGRESS, CANCELLING) and record.done >= record.total:
        await finalize(files, spec, record, now)
    elif status in (IN_PROGRESS, CANCELLING) and record.queued != generation:
        # Never queued (its intake died: once it is stale), or queued in a queue the store
        # has lost since (at once): its unfinished lines are queued (again).
        since = record.cancelling_at if status == CANCELLING else record.in_progress_at
        if record.queued or since < stale:
            unfinished = await store.unfinished(tenant, batch_id)
            queued = await store.queue.enqueue(tenant, batch_id, unfinished)
            await store.move(tenant, batch_id, [status], status, since, {"queued": str(queued)})
    elif status == FINALIZING and record.finalizing_at < stale:
        await finalize(files, spec, record, now)


def waits_for_holds(error: ApiError) -> bool:
    """A budget refusal that requests in flight may undo when they settle (it says when
    to ask again): the budget minus its spend could still pay the line's worst case."""
    return isinstance(error, InsufficientQuota) and "Retry-After" in error.headers


def retryable(error: ApiError) -> bool:
    """Worth another try later: an overloaded pool, a store that is down, a rate limit,
    a budget whose open holds may leave room. A budget that cannot pay the line's worst
    case even once every hold has settled (``insufficient_quota``) is the line's answer."""
    return isinstance(error, Overloaded | ServiceUnavailable | RateLimited) or waits_for_holds(
        error
    )


def _wait(spec: BatchesConfig, attempt: int, refused: Refused | None) -> float:
    wait = float(min(spec.retry_s * 2 ** max(attempt - 1, 0), MAX_WAIT_S))
    if refused is not None:
        hinted = refused.error.headers.get("Retry-After") or refused.error.headers.get(
            "retry-after"
        )
        if hinted is not None:
            with contextlib.suppress(ValueError):  # an HTTP date: the backoff stands
                wait = max(wait, min(float(hinted), MAX_WAIT_S))
    return wait


def _where(line: QueuedLine) -> tuple[str, str, int]:
    return line.tenant, line.batch_id, line.index
