"""The request pipeline shared by chat and text completions.

route → open a stream on the tier's pool (failing over along the tier chain before
the first token) → hand typed chunks to the endpoint → finish: price the usage.
Endpoints turn chunks into wire bodies; nothing here knows JSON.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from backends.base import Chunk, GenerationRequest, Usage
from backends.errors import EngineError, EngineUnavailable
from backends.pool import StreamInfo
from gateway import observe
from gateway.errors import GatewayTimeout, ModelNotFound, PermissionDenied, from_engine_error
from gateway.state import GatewayState
from gateway.tracing import GENERATION, SETTLEMENT, current_trace
from policies.savings import routing_saving
from policies.tenants import Principal
from routers.decision import TierDecision, TierNotAllowed, UnknownModel, decide


@dataclass(frozen=True, slots=True)
class RoutedRequest:
    request_id: str
    created: int
    principal: Principal
    requested_model: str
    decision: TierDecision
    generation: GenerationRequest
    stream: bool
    include_usage: bool

    @property
    def tier(self) -> str:
        return self.decision.tier


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


def new_request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def route(
    state: GatewayState,
    principal: Principal,
    requested_model: str,
    build: GenerationRequest,
    *,
    stream: bool,
    include_usage: bool,
) -> RoutedRequest:
    try:
        decision = decide(state.config, principal.policy, requested_model)
    except UnknownModel:
        raise ModelNotFound(
            f"The model `{requested_model}` does not exist or you do not have access to it.",
            param="model",
        ) from None
    except TierNotAllowed as exc:
        raise PermissionDenied(str(exc), param="model") from None
    return RoutedRequest(
        request_id=build.request_id,
        created=int(time.time()),
        principal=principal,
        requested_model=requested_model,
        decision=decision,
        generation=replace(build, model=decision.pinned_model or build.model),
        stream=stream,
        include_usage=include_usage,
    )


class Execution:
    """One request's run on the engines: ``open`` primes the stream, ``chunks`` drains it."""

    def __init__(self, state: GatewayState, routed: RoutedRequest) -> None:
        self.state = state
        self.routed = routed
        self.outcome = Outcome(tier=routed.tier, model=routed.generation.model)
        self._stream: AsyncIterator[Chunk] | None = None
        self._first: Chunk | None = None
        self._finished = False
        self._deadline = asyncio.get_running_loop().time() + state.config.server.request_timeout_s
        self._observed = False
        self.started = time.perf_counter()
        self.trace = current_trace()
        observe.begin(self.trace, routed)
        self._generation = self.trace.start(GENERATION)

    async def open(self) -> None:
        """Get the first chunk, failing over along the tier chain while nothing was sent."""
        tier = self.routed.tier
        visited: list[str] = []
        while True:
            info = StreamInfo()
            stream = self.state.pools[tier].stream(self.routed.generation, info)
            try:
                async with asyncio.timeout_at(self._deadline):
                    self._first = await anext(stream)
            except EngineUnavailable as exc:
                fallback = self.state.config.tiers[tier].fallback
                if fallback is None or fallback in visited or fallback == self.routed.tier:
                    self._fail(str(exc))
                    raise from_engine_error(exc) from exc
                visited.append(tier)
                tier = fallback
                continue
            except EngineError as exc:
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
            self._stream = stream
            self.outcome.tier = tier
            self.outcome.model = info.model or self.outcome.model
            if visited:
                self.outcome.failover_from = self.routed.tier
            return

    async def chunks(self) -> AsyncIterator[Chunk]:
        """The primed first chunk, then the rest; an engine error after the first byte
        surfaces as ``ApiError`` for the SSE layer to turn into an error event."""
        assert self._stream is not None and self._first is not None
        stream, first = self._stream, self._first
        try:
            chunk: Chunk | None = first
            while chunk is not None:
                if chunk.usage is not None:
                    self._settle(chunk)
                yield chunk
                async with asyncio.timeout_at(self._deadline):
                    chunk = await anext(stream, None)
        except EngineError as exc:
            self._fail(str(exc))
            raise from_engine_error(exc) from exc
        except TimeoutError:
            raise self._timed_out() from None
        finally:
            await _aclose(stream)
            if not self._finished:
                self._fail("cancelled")

    def _settle(self, final: Chunk) -> None:
        self._finished = True
        self.outcome.usage = final.usage
        self.outcome.finish_reason = final.finish_reason
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

    def headers(self) -> dict[str, str]:
        headers = {
            "x-request-id": self.routed.request_id,
            "x-tiergate-tier": self.outcome.tier,
            "x-tiergate-model": self.outcome.model,
            "x-tiergate-cache": self.outcome.cache,
        }
        if self.outcome.failover_from is not None:
            headers["x-tiergate-failover"] = f"{self.outcome.failover_from}->{self.outcome.tier}"
        return headers


async def _aclose(stream: AsyncIterator[Chunk]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
