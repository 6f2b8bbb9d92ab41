"""Running a routed request, shared by chat and text completions.

admit (rate limit, budget) → the cache, or a stream on the tier's pool (failing over
along the tier chain before the first token) → typed chunks to the endpoint → one
``Outcome`` → settle. Endpoints turn chunks into wire bodies; nothing here knows JSON.
Routing is in ``gateway.routing``; the request's config is the snapshot it carries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from backends.base import Chunk, GenerationRequest
from backends.errors import EngineError, EngineUnavailable
from backends.pool import StreamInfo
from gateway import budgeting, observe
from gateway.cache.record import CachedResponse, Recorder
from gateway.cache.service import CachePlan, Lookup, PromptCache
from gateway.errors import (
    ApiError,
    GatewayTimeout,
    InsufficientQuota,
    RateLimited,
    from_engine_error,
)
from gateway.outcome import Charges, Outcome, Progress, conclude
from gateway.routing import RoutedRequest
from gateway.spend import run_cap
from gateway.state import GatewayState
from gateway.timing import current_timer, timed
from gateway.tracing import GENERATION, SETTLEMENT, current_trace
from routers.decision import TierDecision
from routers.embedding import EmbeddingOnce

log = logging.getLogger(__name__)


class Execution:
    """One request's run: ``open`` admits it (rate limit, budget) and primes the stream,
    ``chunks`` drains it, ``close`` (always called, once it has ended in any way) settles.

    ``progress`` is what it has seen so far; ``outcome`` is set once, when it ends."""

    def __init__(self, state: GatewayState, routed: RoutedRequest) -> None:
        self.state = state
        self.routed = routed
        self.config = routed.config
        self.progress = Progress(routed.tier, routed.generation.model, routed.decision.trail)
        self.outcome: Outcome | None = None
        self.ticket: budgeting.Ticket | None = None
        self._stream: AsyncIterator[Chunk] | None = None
        self._first: Chunk | None = None
        self._deadline = asyncio.get_running_loop().time() + self.config.server.request_timeout_s
        self.started = time.perf_counter()
        self.trace = current_trace()
        observe.begin(self.trace, routed)
        self._generation = self.trace.start(GENERATION)
        self._draining = False
        self._settling: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._recorder: Recorder | None = None
        # routing.feedback: a sampled request collects its answer for the judge
        self._tap = state.feedback.tap(routed) if state.feedback is not None else None

    @property
    def model(self) -> str:
        """The model answering (known once ``open`` has returned)."""
        return self.progress.model

    async def open(self) -> None:
        """Admit, then get the first chunk, failing over along the tier chain while
        nothing was sent."""
        try:
            with timed("budget.reservation"):
                decision, self.ticket = await budgeting.admit(self.state, self.routed)
        except RateLimited as exc:
            self._end(exc.code or "rate_limited", denied="rate_limit")
            raise
        except InsufficientQuota as exc:
            self._end(exc.code or "insufficient_quota", denied="budget")
            raise
        except ApiError as exc:  # the budget or rate-limit store is down (503)
            self._end(exc.code or "refused")
            raise
        self._admitted(decision, self.ticket)
        self._heartbeat = budgeting.keep_alive(self.state, self.config, self.ticket)
        if not await self._from_cache():
            await self._dispatch()

    def _admitted(self, decision: TierDecision, ticket: budgeting.Ticket) -> None:
        """Run on the tier admission chose (a budget downgrade drops a pinned model)."""
        routed = self.routed
        if ticket.downgraded:
            generation = replace(routed.generation, model=routed.requested_model)
            self.routed = replace(routed, decision=decision, generation=generation)
            self.progress.downgraded_from = ticket.requested_tier
        self.progress.tier, self.progress.trail = decision.tier, decision.trail

    async def _dispatch(self) -> None:
        decision, visited = self.routed.decision, []
        while True:
            tier = decision.tier
            info = StreamInfo()
            stream = self.state.pools[tier].stream(self._capped(decision), info)
            self.progress.dispatched = True
            try:
                with timed("engine"):
                    async with asyncio.timeout_at(self._deadline):
                        first = await anext(stream)
            except EngineUnavailable as exc:
                self.progress.dispatched = False
                fallback = self.config.tiers[tier].fallback
                if fallback is None or fallback in visited or fallback == self.routed.tier:
                    self._end(str(exc))
                    raise from_engine_error(exc) from exc
                visited.append(tier)
                # The one place a tier moves after admission; the move joins the trail.
                decision = decision.moved(fallback, f"failover: {tier} -> {fallback} ({exc})")
                self.progress.failover_from = self.progress.failover_from or tier
                self.progress.tier, self.progress.trail = decision.tier, decision.trail
                continue
            except EngineError as exc:
                self.progress.dispatched = False
                self._end(str(exc))
                raise from_engine_error(exc) from exc
            except TimeoutError:
                await _aclose(stream)
                raise self._timed_out() from None
            except asyncio.CancelledError:
                # The client left before the first token: abort the engine request now.
                self._end("cancelled")
                await _aclose(stream)
                raise
            self.progress.model = info.model or self.progress.model
            self._primed(stream, first)
            return

    def _capped(self, decision: TierDecision) -> GenerationRequest:
        """The engine request on ``decision.tier``: never more completion tokens than the
        reservation paid for on any model that tier's pool may pick."""
        assert self.ticket is not None
        cap = run_cap(self.config, decision.tier, self.ticket.completion_cap, decision.pinned_model)
        self.progress.run_cap = cap
        generation = self.routed.generation
        return replace(generation, sampling=replace(generation.sampling, max_tokens=cap))

    def _primed(self, stream: AsyncIterator[Chunk], first: Chunk) -> None:
        self.progress.first_chunk_s = time.perf_counter() - self.started
        self._count(first)
        self._stream, self._first = stream, first

    async def _from_cache(self) -> bool:
        """Answer from the cache if it has the answer; else arrange to store the live one."""
        plan, cache = self.routed.cache, self.state.cache
        if plan is None or cache is None:
            return False
        if plan.lookup:
            found = self.routed.exact
            if found is None or found.status == "miss":
                with timed("cache.lookup"):
                    found = await _lookup(cache, found, plan, self.routed.embedding)
            self.progress.cache, self.progress.similarity = found.status, found.similarity
            if found.response is not None:
                await self._replay(found.status, found.response)
                return True
        # A budget downgrade answers on a cheaper tier than asked: not the request's answer.
        downgraded = self.ticket is not None and self.ticket.downgraded
        if plan.store and not downgraded:
            self._recorder = Recorder()
        return False

    async def _replay(self, status: str, hit: CachedResponse) -> None:
        progress = self.progress
        progress.tier, progress.model, progress.hit_cost_usd = hit.tier, hit.model, hit.cost_usd
        progress.trail = (*progress.trail, f"cache: {status} hit from tier {hit.tier}")
        stream = hit.replay()
        self._primed(stream, await anext(stream))

    def _count(self, chunk: Chunk) -> None:
        if self._tap is not None:
            self._tap.add(chunk.text)
        if chunk.text or chunk.tool_calls:
            progress = self.progress
            progress.streamed_chunks += 1
            text = chunk.text  # its UTF-8 bytes; ASCII text without encoding it (per chunk)
            progress.streamed_bytes += len(text) if text.isascii() else len(text.encode())
            if progress.first_token_s is None:
                progress.first_token_s = time.perf_counter() - self.started

    async def chunks(self) -> AsyncIterator[Chunk]:
        """The primed first chunk, then the rest; an engine error after the first byte
        surfaces as ``ApiError`` for the SSE layer to turn into an error event."""
        assert self._stream is not None and self._first is not None
        stream, first = self._stream, self._first
        self._draining = True
        try:
            chunk: Chunk | None = first
            while chunk is not None:
                if chunk.finish_reason is not None or chunk.usage is not None:
                    chunk = self._final(chunk)
                if self._recorder is not None:
                    self._recorder.add(chunk)
                yield chunk
                async with asyncio.timeout_at(self._deadline):
                    chunk = await anext(stream, None)
                if chunk is not None:
                    self._count(chunk)
            await self._fill_cache()
        except EngineError as exc:
            self._end(str(exc))
            raise from_engine_error(exc) from exc
        except TimeoutError:
            raise self._timed_out() from None
        finally:
            await _aclose(stream)
            if self.outcome is None:
                self._end("cancelled")

    def _final(self, chunk: Chunk) -> Chunk:
        """The last chunk ends the request; without usage it gets the usage charged."""
        self.progress.usage, self.progress.finish_reason = chunk.usage, chunk.finish_reason
        outcome = self._end(None)
        return chunk if chunk.usage is not None else replace(chunk, usage=outcome.usage)

    async def _fill_cache(self) -> None:
        """Only a stream that ran to its natural end reaches here: store it."""
        plan, cache, recorder, outcome = (
            self.routed.cache,
            self.state.cache,
            self._recorder,
            self.outcome,
        )
        if plan is None or cache is None or recorder is None or outcome is None:
            return
        if outcome.error is not None:
            return
        finished = recorder.finished(
            model=outcome.model, tier=outcome.tier, cost_usd=outcome.cost_usd
        )
        if finished is not None:
            await cache.store(plan, finished, self.routed.embedding)

    def _timed_out(self) -> GatewayTimeout:
        timeout = self.config.server.request_timeout_s
        self._end("timeout")
        return GatewayTimeout(f"the engine did not finish within {timeout:g} s")

    def _end(self, error: str | None, denied: str | None = None) -> Outcome:
        """The request has ended: compute its one ``Outcome`` and record metrics and trace."""
        if self.outcome is not None:
            return self.outcome
        plan = self.routed.cache
        charges = Charges(
            prompt_upper=self.ticket.prompt_upper if self.ticket is not None else 0,
            hit_charge=plan.policy.hit_charge if plan is not None else 0.0,
        )
        latency_s = time.perf_counter() - self.started
        with self.trace.stage(SETTLEMENT):
            outcome = self.outcome = conclude(
                self.config,
                self.progress,
                charges,
                error=error,
                denied=denied,
                latency_s=latency_s,
                classify_s=self.routed.classify_s,
            )
        if outcome.saved_cache_usd and self.state.cache is not None:
            self.state.cache.record_saving(outcome.saved_cache_usd)
        observe.finish(self.state.metrics, self.trace, self._generation, self.routed, outcome)
        return outcome

    async def close(self) -> None:
        """Abort an unread stream and settle the budget; safe to call more than once, and
        never raises: the answer may already be with the client.

        Settlement is its own task: a request cancelled while closing still settles."""
        if self._stream is not None and not self._draining:
            self._draining = True
            await _aclose(self._stream)
        outcome = self._end("cancelled")
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._settling is None and self.state.feedback is not None:
            # Once per request: its record, and its shadow pair when sampled (both off the path).
            self.state.feedback.finished(self.routed, outcome, self._tap)
        if self._settling is None:
            self._settling = budgeting.settle_later(self.state, self.routed, self.ticket, outcome)
        if self._settling is not None:
            await asyncio.shield(self._settling)

    def headers(self) -> dict[str, str]:
        """From the ``Outcome`` once the request has ended (a whole answer), else from
        what is known when a stream starts."""
        seen = self.outcome if self.outcome is not None else self.progress
        headers = {
            "x-request-id": self.routed.request_id,
            "x-tiergate-tier": seen.tier,
            "x-tiergate-model": seen.model,
            "x-tiergate-cache": seen.cache,
        }
        if seen.similarity is not None and seen.cache == "semantic":
            headers["x-tiergate-cache-similarity"] = f"{seen.similarity:.4f}"
        if self.routed.decision.score is not None:
            headers["x-tiergate-complexity"] = f"{self.routed.decision.score:.4f}"
        if seen.failover_from is not None:
            headers["x-tiergate-failover"] = f"{seen.failover_from}->{seen.tier}"
        if self.ticket is not None:
            headers.update(self.ticket.headers)
        if seen.downgraded_from is not None:
            headers["x-tiergate-downgraded"] = f"{seen.downgraded_from}->{seen.tier}"
        if self.outcome is not None and not self.routed.stream:
            headers["x-tiergate-cost-usd"] = f"{self.outcome.cost_usd:.8f}"
        timer = current_timer()
        if timer is not None:
            headers["server-timing"] = timer.header()
        return headers


async def _lookup(
    cache: PromptCache, exact: Lookup | None, plan: CachePlan, embedding: EmbeddingOnce | None
) -> Lookup:
    """The rest of the lookup: all of it, or the semantic part after an exact miss."""
    if exact is None:
        return await cache.lookup(plan, embedding)
    return await cache.lookup_semantic(plan, embedding)


async def _aclose(stream: AsyncIterator[Chunk]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
