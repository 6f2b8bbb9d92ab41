"""One request's run on the serving core (``gateway.core.serving_core``).

admit (the request's ``Hold``: rate limit, budget) → the cache (its ``CacheProbe``), or
a stream on the tier's pool (failing over along the tier chain before the first token)
→ typed chunks to the wire format → one ``Outcome`` → settle. It knows no JSON and no
HTTP: wire formats are at the edge (``gateway.wire.format``, ``gateway.edge.respond``);
its caller reads the answer through ``gateway.core.answer``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace

from backends.base import Chunk, GenerationRequest
from backends.errors import EngineError, EngineUnavailable
from backends.pool import EnginePool, StreamInfo
from gateway.cache.plan import Lookup
from gateway.cache.record import CachedResponse, Recorder
from gateway.cache.service import CacheProbe
from gateway.core import escalation
from gateway.errors import ApiError, GatewayTimeout, from_engine_error
from gateway.guardrails.guard import RequestGuard
from gateway.learning.service import Feedback
from gateway.money.hold import Hold, Money, refusal
from gateway.money.outcome import conclude
from gateway.telemetry import observe
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.timing import current_timer, timed
from gateway.telemetry.tracing import GENERATION, SETTLEMENT, current_trace
from gateway.types import Charges, Outcome, Progress, RoutedRequest
from routers.decision import TierDecision
from routers.live_sessions import Sessions, SessionWatch

log = logging.getLogger(__name__)


class Run:
    """One request's run: ``open`` admits it (rate limit, budget) and primes the stream,
    ``chunks`` drains it, ``close`` (always called, once it has ended in any way) settles.

    ``progress`` is what it has seen so far; ``outcome`` is set once, when it ends. What
    a wire format reads of it: ``request_id``, ``created``, ``model`` (once ``open`` has
    returned), ``include_usage``, and the chunks."""

    def __init__(
        self,
        routed: RoutedRequest,
        probe: CacheProbe | None,
        found: Lookup | None,
        pools: Mapping[str, EnginePool],
        money: Money,
        metrics: GatewayMetrics,
        feedback: Feedback | None = None,
        sessions: Sessions | None = None,
        guard: RequestGuard | None = None,
    ) -> None:
        self.routed = routed
        self.probe, self.found = probe, found  # the cache's half of the request
        self.config = routed.config
        self.pools = pools
        self.metrics = metrics
        self.decision = decision = routed.decision  # moved only by ``_move``
        model = decision.pinned_model or routed.ask.generation.model
        self.progress = Progress(decision.tier, model, decision.trail)
        self.outcome: Outcome | None = None
        self.hold = Hold.for_generation(money, routed)
        self._stream: AsyncIterator[Chunk] | None = None
        self._first: Chunk | None = None
        self._deadline = asyncio.get_running_loop().time() + self.config.server.request_timeout_s
        self.started = time.perf_counter()
        self.trace = current_trace()
        observe.begin(self.trace, routed)
        self._generation = self.trace.start(GENERATION)
        self._draining = False
        self._recorder: Recorder | None = None
        # routing.feedback: a sampled request collects its answer for the judge
        self.feedback = feedback
        self._tap = feedback.tap(routed) if feedback is not None else None
        self._fed = False
        # routing.sessions: what the turn's stream shows, told to its session at the end
        self.sessions = sessions if routed.session is not None else None
        self._watch = SessionWatch(bool(routed.ask.generation.tools)) if self.sessions else None
        self.guard = guard  # guardrails: the answer's window, local tiers only, restore

    @property
    def request_id(self) -> str:
        return self.routed.ask.request_id

    @property
    def created(self) -> int:
        return self.routed.created

    @property
    def model(self) -> str:
        """The model answering (known once ``open`` has returned)."""
        return self.progress.model

    @property
    def include_usage(self) -> bool:
        return self.routed.ask.include_usage

    @property
    def session_id(self) -> str | None:
        session = self.routed.session
        return None if session is None else session.key.id

    async def open(self) -> None:
        """Admit, then get the first chunk, failing over along the tier chain while
        nothing was sent."""
        with timed("budget.reservation"):
            try:
                await self.hold.open()
            except ApiError as exc:  # refused: the outcome says why; ``close`` records it
                self._end(*refusal(exc))
                raise
        self._admitted()
        # routing.escalation: the cheaper tier's answer first, kept or re-asked one tier up
        if not await self._from_cache() and not await escalation.first_attempt(self):
            await self._dispatch()

    def _admitted(self) -> None:
        """Run on the tier admission held money for (a budget downgrade)."""
        ticket = self.hold.ticket
        assert ticket is not None
        if ticket.downgraded:
            held = ticket.held.tier
            self._move(held, f"budget: downgraded {self.decision.tier} -> {held}")
            self.progress.downgraded_from = ticket.requested_tier

    def _move(self, tier: str, why: str) -> None:
        """The one place the tier moves after routing (a budget downgrade at admission, a
        failover before the first token): the move joins the trail; a pinned model is
        dropped."""
        self.decision = decision = self.decision.moved(tier, why)
        self.progress.tier, self.progress.trail = decision.tier, decision.trail

    async def _dispatch(self) -> None:
        asked, visited = self.decision.tier, []
        while True:
            tier = self.decision.tier
            info = StreamInfo()
            request, held = self._engine_request(self.decision), self._held(tier)
            stream = self.pools[tier].stream(request, info, held=held)
            if self.guard is not None:
                stream = self.guard.stream(tier, stream)
            self.progress.dispatched = True
            try:
                with timed("engine"):
                    async with asyncio.timeout_at(self._deadline):
                        first = await anext(stream)
            except EngineUnavailable as exc:
                self.progress.dispatched = False
                fallback = self.config.tiers[tier].fallback
                if fallback is None or fallback in visited or fallback == asked:
                    self._end(str(exc))
                    raise self._answered(exc) from exc
                visited.append(tier)
                self._move(fallback, f"failover: {tier} -> {fallback} ({exc})")
                self.progress.failover_from = self.progress.failover_from or tier
                continue
            except EngineError as exc:
                self.progress.dispatched = False
                self._end(str(exc))
                raise self._answered(exc) from exc
            except TimeoutError:
                await _aclose(stream)
                raise self._timed_out() from None
            except asyncio.CancelledError:
                # The client left before the first token: abort the engine request now.
                self._end("cancelled")
                await _aclose(stream)
                raise
            self.progress.model = info.model or self.progress.model
            self.progress.replica = info.replica
            self._primed(stream, first)
            return

    def _held(self, tier: str) -> tuple[str, int] | None:
        """The replica that served the session's last turn on ``tier`` and the prefix it
        holds, for the pool's prefix affinity (another gateway replica may have sent it)."""
        session = self.routed.session
        if session is None or session.replica is None or session.tier != tier:
            return None
        return session.replica, session.cached_chars

    def _answered(self, exc: EngineError) -> ApiError:
        """The client's error for an engine's, under this request's id (the ledger's)."""
        error = from_engine_error(exc)
        error.headers.setdefault("x-request-id", self.request_id)
        return error

    def _engine_request(self, decision: TierDecision) -> GenerationRequest:
        """What the engine on ``decision.tier`` is asked, built once per dispatch from the
        wire's request: the pinned model (else the one asked for), a whole answer or a
        stream, and never more completion tokens than the reservation paid for on any
        model that tier's pool may pick (the hold's run cap)."""
        cap = self.hold.run_cap(decision.tier, decision.pinned_model)
        self.progress.run_cap = cap
        ask = self.routed.ask
        generation = ask.generation
        return replace(
            generation,
            model=decision.pinned_model or generation.model,
            whole=not ask.stream,
            priority=ask.priority,
            sampling=replace(generation.sampling, max_tokens=cap),
        )

    def _primed(self, stream: AsyncIterator[Chunk], first: Chunk) -> None:
        self.progress.first_chunk_s = time.perf_counter() - self.started
        self._count(first)
        self._stream, self._first = stream, first

    async def _from_cache(self) -> bool:
        """Answer from the cache if it had the answer; else arrange to store the live one."""
        probe, found = self.probe, self.found
        if probe is None:
            return False
        ticket = self.hold.ticket
        downgraded = ticket is not None and ticket.downgraded
        if found is not None and found.response is not None and downgraded:
            assert ticket is not None
            tiers = list(self.config.tiers)
            if tiers.index(found.response.tier) > tiers.index(ticket.held.tier):
                found = self.found = probe.decline("budget")  # dearer than allowed
        if found is not None:
            self.progress.cache, self.progress.similarity = found.status, found.similarity
            if found.response is not None:
                self.progress.cache_entry = found.entry_id  # a verdict on it evicts it
                probe.served(found)
                await self._replay(found.status, found.response)
                return True
        # A budget downgrade answers on a cheaper tier than asked: not the request's answer.
        if probe.plan.store and not downgraded:
            self._recorder = Recorder()
        return False

    async def _replay(self, status: str, hit: CachedResponse) -> None:
        progress = self.progress
        progress.tier, progress.model, progress.hit_cost_usd = hit.tier, hit.model, hit.cost_usd
        progress.trail = (*progress.trail, f"cache: {status} hit from tier {hit.tier}")
        stream = hit.replay()
        if self.guard is not None:  # the entry may be another key's, stored unguarded
            stream = self.guard.answer(stream)
        self._primed(stream, await anext(stream))

    def _count(self, chunk: Chunk) -> None:
        if self._tap is not None:
            self._tap.add(chunk.text)
        if self._watch is not None:
            self._watch.saw(chunk)
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
            raise self._answered(exc) from exc
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
        probe, recorder, outcome = self.probe, self._recorder, self.outcome
        if probe is None or recorder is None or outcome is None or outcome.error is not None:
            return
        # The entry keeps the interactive price: a batch line's discount is its own.
        listed = outcome.cost_usd + outcome.saved_batch_usd
        finished = recorder.finished(model=outcome.model, tier=outcome.tier, cost_usd=listed)
        if finished is not None:
            await probe.store(finished)

    def _timed_out(self) -> GatewayTimeout:
        timeout = self.config.server.request_timeout_s
        self._end("timeout")
        return GatewayTimeout(f"the engine did not finish within {timeout:g} s")

    def _end(self, error: str | None, denied: str | None = None) -> Outcome:
        """The request has ended: compute its one ``Outcome`` and record metrics and trace."""
        if self.outcome is not None:
            return self.outcome
        probe, ticket = self.probe, self.hold.ticket
        charges = Charges(
            prompt_upper=ticket.prompt_upper if ticket is not None else 0,
            hit_charge=probe.hit_charge if probe is not None else 0.0,
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
                batch=self.routed.batch,
            )
        if outcome.saved_cache_usd and probe is not None:
            probe.saved(outcome.saved_cache_usd)
        observe.finish(self.metrics, self.trace, self._generation, self.routed, outcome)
        return outcome

    async def close(self) -> None:
        """Abort an unread stream and settle the budget (the hold); safe to call more than
        once, and never raises: the answer may already be with the client."""
        if self._stream is not None and not self._draining:
            self._draining = True
            await _aclose(self._stream)
        outcome = self._end("cancelled")  # how it ended, unless it already had
        if self.feedback is not None and not self._fed:
            self._fed = True  # once per request: its record, and its shadow pair when sampled
            self.feedback.finished(self.routed, outcome, self._tap, self.progress.cache_entry)
        session, sessions = self.routed.session, self.sessions
        if session is not None and sessions is not None and self.progress.dispatched:
            self.sessions = None  # once per request
            sessions.finished(
                session, outcome.tier, outcome.finish_reason, self._watch, self.progress.replica
            )
        await self.hold.close(outcome)

    def headers(self) -> dict[str, str]:
        """From the ``Outcome`` once the request has ended (a whole answer), else from
        what is known when a stream starts."""
        seen = self.outcome if self.outcome is not None else self.progress
        headers = {
            "x-request-id": self.request_id,
            "x-tiergate-tier": seen.tier,
            "x-tiergate-model": seen.model,
            "x-tiergate-cache": seen.cache,
        }
        if seen.similarity is not None and seen.cache == "semantic":
            headers["x-tiergate-cache-similarity"] = f"{seen.similarity:.4f}"
        if self.decision.score is not None:
            headers["x-tiergate-complexity"] = f"{self.decision.score:.4f}"
        if seen.failover_from is not None:
            headers["x-tiergate-failover"] = f"{seen.failover_from}->{seen.tier}"
        if self.routed.session is not None:
            headers["x-tiergate-session"] = self.routed.session.key.short
        headers.update(self.hold.headers)
        if seen.downgraded_from is not None:
            headers["x-tiergate-downgraded"] = f"{seen.downgraded_from}->{seen.tier}"
        headers.update(escalation.headers(seen))
        if self.outcome is not None and not self.routed.ask.stream:
            headers["x-tiergate-cost-usd"] = f"{self.outcome.cost_usd:.8f}"
        timer = current_timer()
        if timer is not None:
            headers["server-timing"] = timer.header()
        return headers


async def _aclose(stream: AsyncIterator[Chunk]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
