"""Running a routed request, shared by chat and text completions.

admit (rate limit, budget) → the cache, or a stream on the tier's pool (failing over
along the tier chain before the first token) → typed chunks to the endpoint → settle.
Endpoints turn chunks into wire bodies; nothing here knows JSON. Routing is in
``gateway.routing``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from backends.base import Chunk, Usage
from backends.errors import EngineError, EngineUnavailable
from backends.pool import StreamInfo
from gateway import budgeting, observe
from gateway.cache.record import CachedResponse, Recorder
from gateway.errors import (
    ApiError,
    GatewayTimeout,
    from_engine_error,
)
from gateway.routing import RoutedRequest
from gateway.state import GatewayState
from gateway.timing import current_timer, timed
from gateway.tracing import GENERATION, SETTLEMENT, current_trace
from policies.savings import routing_saving

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outcome:
    """What happened to one request, filled in as it runs; read once it ends."""

    tier: str
    model: str
    failover_from: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    cost_usd: float = 0.0
    saved_routing_usd: float = 0.0
    cache: str = "bypass"
    error: str | None = None
    ttft_s: float | None = None
    latency_s: float = 0.0
    saved_usd: float = 0.0  # a cache hit: what it would have cost, less what was charged
    similarity: float | None = None  # of a semantic hit


class Execution:
    """One request's run: ``open`` admits it (rate limit, budget) and primes the stream,
    ``chunks`` drains it, ``close`` (always called, once it has ended in any way) settles."""

    def __init__(self, state: GatewayState, routed: RoutedRequest) -> None:
        self.state = state
        self.routed = routed
        self.outcome = Outcome(tier=routed.tier, model=routed.generation.model)
        self.ticket: budgeting.Ticket | None = None
        self._stream: AsyncIterator[Chunk] | None = None
        self._first: Chunk | None = None
        self._finished = False
        self._deadline = asyncio.get_running_loop().time() + state.config.server.request_timeout_s
        self._observed = False
        self.started = time.perf_counter()
        self.trace = current_trace()
        observe.begin(self.trace, routed)
        self._generation = self.trace.start(GENERATION)
        self._draining = False
        self._dispatched = False
        self._chunks = 0
        self._first_at: float | None = None
        self._settling: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._hit: CachedResponse | None = None
        self._recorder: Recorder | None = None

    async def open(self) -> None:
        """Admit, then get the first chunk, failing over along the tier chain while
        nothing was sent."""
        try:
            with timed("budget.reservation"):
                tier, self.ticket = await budgeting.admit(self.state, self.routed)
        except ApiError as exc:  # refused (429) or the budget store is down (503)
            self._fail(exc.code or "refused")
            raise
        self._apply(tier, self.ticket)
        self._heartbeat = budgeting.keep_alive(self.state, self.ticket)
        if await self._from_cache():
            return
        visited: list[str] = []
        while True:
            info = StreamInfo()
            stream = self.state.pools[tier].stream(self.routed.generation, info)
            self._dispatched = True
            try:
                with timed("engine"):
                    async with asyncio.timeout_at(self._deadline):
                        self._first = await anext(stream)
            except EngineUnavailable as exc:
                self._dispatched = False
                fallback = self.state.config.tiers[tier].fallback
                if fallback is None or fallback in visited or fallback == self.routed.tier:
                    self._fail(str(exc))
                    raise from_engine_error(exc) from exc
                visited.append(tier)
                tier = fallback
                continue
            except EngineError as exc:
                self._dispatched = False
                self._fail(str(exc))
                raise from_engine_error(exc) from exc
            except TimeoutError:
                await _aclose(stream)
                raise self._timed_out() from None
            except asyncio.CancelledError:
                # The client left before the first token: abort the engine request now.
                self._fail("cancelled")
                await _aclose(stream)
                raise
            self.outcome.ttft_s = time.perf_counter() - self.started
            self._count(self._first)
            self._stream = stream
            self.outcome.tier = tier
            self.outcome.model = info.model or self.outcome.model
            if visited:
                self.outcome.failover_from = self.routed.tier
            return

    async def _from_cache(self) -> bool:
        """Answer from the cache if it has the answer; else arrange to store the live one."""
        plan, cache = self.routed.cache, self.state.cache
        if plan is None or cache is None:
            return False
        if plan.lookup:
            with timed("cache.lookup"):
                found = await cache.lookup(plan, self.routed.embedding)
            self.outcome.cache, self.outcome.similarity = found.status, found.similarity
            if found.response is not None:
                hit = self._hit = found.response
                self.outcome.tier, self.outcome.model = hit.tier, hit.model
                self._stream = hit.replay()
                self._first = await anext(self._stream)
                self.outcome.ttft_s = time.perf_counter() - self.started
                self._count(self._first)
                return True
        # A budget downgrade answers on a cheaper tier than asked: not the request's answer.
        downgraded = self.ticket is not None and self.ticket.downgraded
        if plan.store and not downgraded:
            self._recorder = Recorder()
        return False

    def _apply(self, tier: str, ticket: budgeting.Ticket) -> None:
        """Run on the tier admission chose, capped at the tokens it reserved for."""
        routed = self.routed
        generation = routed.generation
        cap = budgeting.enforce_cap(routed, ticket)
        if cap is not None:
            generation = replace(generation, sampling=replace(generation.sampling, max_tokens=cap))
        if tier != routed.tier:
            trail = (*routed.decision.trail, f"budget: downgraded {routed.tier} -> {tier}")
            decision = replace(routed.decision, tier=tier, pinned_model=None, trail=trail)
            generation = replace(generation, model=routed.requested_model)
            routed = replace(routed, decision=decision)
        self.routed = replace(routed, generation=generation)
        self.outcome.tier = tier

    def _count(self, chunk: Chunk) -> None:
        if chunk.text or chunk.tool_calls:
            self._chunks += 1
            if self._first_at is None:
                self._first_at = time.perf_counter()

    async def chunks(self) -> AsyncIterator[Chunk]:
        """The primed first chunk, then the rest; an engine error after the first byte
        surfaces as ``ApiError`` for the SSE layer to turn into an error event."""
        assert self._stream is not None and self._first is not None
        stream, first = self._stream, self._first
        self._draining = True
        try:
            chunk: Chunk | None = first
            while chunk is not None:
                if self._recorder is not None:
                    self._recorder.add(chunk)
                if chunk.usage is not None:
                    self._settle(chunk)
                yield chunk
                async with asyncio.timeout_at(self._deadline):
                    chunk = await anext(stream, None)
                if chunk is not None:
                    self._count(chunk)
            await self._fill_cache()
        except EngineError as exc:
            self._fail(str(exc))
            raise from_engine_error(exc) from exc
        except TimeoutError:
            raise self._timed_out() from None
        finally:
            await _aclose(stream)
            if not self._finished:
                self._fail("cancelled")

    async def _fill_cache(self) -> None:
        """Only a stream that ran to its natural end reaches here: store it."""
        plan, cache, recorder = self.routed.cache, self.state.cache, self._recorder
        if plan is None or cache is None or recorder is None or self.outcome.error is not None:
            return
        finished = recorder.finished(
            model=self.outcome.model, tier=self.outcome.tier, cost_usd=self.outcome.cost_usd
        )
        if finished is not None:
            await cache.store(plan, finished, self.routed.embedding)

    def _settle(self, final: Chunk) -> None:
        self._finished = True
        self.outcome.usage = final.usage
        self.outcome.finish_reason = final.finish_reason
        if self._hit is not None:
            self._settle_hit(self._hit)
            return
        with self.trace.stage(SETTLEMENT):
            price = self.state.config.prices.get(self.outcome.model)
            if price is not None and final.usage is not None:
                usage = final.usage
                self.outcome.cost_usd = price.cost(
                    usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens
                )
                self.outcome.saved_routing_usd = routing_saving(
                    self.state.config,
                    self.outcome.cost_usd,
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.cached_tokens,
                )
        self._ended()

    def _settle_hit(self, hit: CachedResponse) -> None:
        """A hit costs ``hit_charge`` of what the stored response cost; the rest is saved."""
        plan = self.routed.cache
        charge = plan.policy.hit_charge if plan is not None else 0.0
        self.outcome.cost_usd = hit.cost_usd * charge
        self.outcome.saved_usd = hit.cost_usd - self.outcome.cost_usd
        if self.state.cache is not None:
            self.state.cache.record_saving(self.outcome.saved_usd)
        self._ended()

    def _timed_out(self) -> GatewayTimeout:
        timeout = self.state.config.server.request_timeout_s
        self._fail("timeout")
        return GatewayTimeout(f"the engine did not finish within {timeout:g} s")

    def _fail(self, reason: str) -> None:
        self._finished = True
        self.outcome.error = reason
        self._ended()

    def _ended(self) -> None:
        if self._observed:
            return
        self._observed = True
        self.outcome.latency_s = time.perf_counter() - self.started
        observe.finish(self, self._generation)

    async def close(self) -> None:
        """Abort an unread stream and settle the budget; safe to call more than once.

        Settlement is its own task: a request cancelled while closing still settles."""
        if self._stream is not None and not self._draining:
            self._draining = True
            await _aclose(self._stream)
        if not self._finished:
            self._fail("cancelled")
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.ticket is None:
            return
        if self._settling is None:
            self._settling = asyncio.ensure_future(self._settle_budget(self.ticket))
            self.state.background.add(self._settling)
            self._settling.add_done_callback(self.state.background.discard)
        await asyncio.shield(self._settling)

    async def _settle_budget(self, ticket: budgeting.Ticket) -> None:
        ended = time.perf_counter()
        status = "ok" if self.outcome.error is None else "error"
        if self.outcome.error == "cancelled":
            status = "cancelled"
        progress = budgeting.Progress(
            dispatched=self._dispatched,
            streamed_chunks=self._chunks,
            latency_ms=(ended - self.started) * 1000,
            ttft_ms=((self._first_at or ended) - self.started) * 1000,
            status=status,
        )
        with timed("budget.settle"):
            await budgeting.settle(self.state, self.routed, ticket, self.outcome, progress)

    def headers(self) -> dict[str, str]:
        headers = {
            "x-request-id": self.routed.request_id,
            "x-tiergate-tier": self.outcome.tier,
            "x-tiergate-model": self.outcome.model,
            "x-tiergate-cache": self.outcome.cache,
        }
        if self.outcome.similarity is not None and self.outcome.cache == "semantic":
            headers["x-tiergate-cache-similarity"] = f"{self.outcome.similarity:.4f}"
        if self.routed.decision.score is not None:
            headers["x-tiergate-complexity"] = f"{self.routed.decision.score:.4f}"
        if self.outcome.failover_from is not None:
            headers["x-tiergate-failover"] = f"{self.outcome.failover_from}->{self.outcome.tier}"
        if self.ticket is not None:
            headers.update(self.ticket.headers)
            if self.ticket.downgraded:
                headers["x-tiergate-downgraded"] = (
                    f"{self.ticket.requested_tier}->{self.outcome.tier}"
                )
        timer = current_timer()
        if timer is not None:
            headers["server-timing"] = timer.header()
        return headers


async def _aclose(stream: AsyncIterator[Chunk]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
