"""A protocol fake: deterministic text at a set pace, with fault injection for tests.

It implements ``Engine`` exactly as the real backends do (counters, cancellation,
load, overload), so tests that use it exercise the same code paths.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

from backends.base import (
    Chunk,
    EngineCounters,
    EngineLoad,
    GenerationRequest,
    Usage,
    unsupported_field,
)
from backends.errors import EngineOverloaded, EngineUnavailable, UpstreamFailed, UpstreamRejected


def _prompt_text(request: GenerationRequest) -> str:
    if request.prompt is not None:
        return request.prompt
    return "\n".join(str(m.get("content") or "") for m in request.messages or ())


class FakeEngine:
    def __init__(
        self,
        *,
        name: str,
        model: str,
        tokens: int = 16,
        token_delay_s: float = 0.0,
        first_token_delay_s: float = 0.0,
        max_running: int = 64,
        fail_after_tokens: int | None = None,
        dead: bool = False,
    ) -> None:
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        self.capabilities: frozenset[str] = frozenset()  # text generation only
        self.tokens = tokens
        self.token_delay_s = token_delay_s
        self.first_token_delay_s = first_token_delay_s
        self.max_running = max_running
        self.fail_after_tokens = fail_after_tokens
        self.dead = dead
        self.seen: list[GenerationRequest] = []

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        self.dead = True

    def load(self) -> EngineLoad:
        return EngineLoad(running=self.counters.active, healthy=not self.dead)

    def words(self, request: GenerationRequest) -> list[str]:
        """The reply is a pure function of the prompt and seed, like greedy decoding."""
        digest = hashlib.sha256(
            f"{_prompt_text(request)}|{request.sampling.seed}".encode()
        ).hexdigest()
        return [f" w{digest[i % 60 : i % 60 + 4]}" for i in range(self.tokens)]

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        if self.dead:
            raise EngineUnavailable(f"{self.name} is dead")
        field = unsupported_field(request, self.capabilities)
        if field is not None:
            raise UpstreamRejected(f"the fake backend cannot honour {field}", status=400)
        if self.counters.active >= self.max_running:
            raise EngineOverloaded(f"{self.name} is full")
        self.seen.append(request)
        self.counters.started += 1
        limit = request.sampling.max_tokens or self.tokens
        words = self.words(request)[:limit]
        sent = 0
        try:
            if self.first_token_delay_s:
                await asyncio.sleep(self.first_token_delay_s)
            for word in words:
                if self.dead:
                    raise UpstreamFailed(f"{self.name} died mid-stream")
                if self.fail_after_tokens is not None and sent >= self.fail_after_tokens:
                    raise UpstreamFailed(f"{self.name} failed after {sent} tokens")
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                sent += 1
                self.counters.generated_tokens += 1
                yield Chunk(text=word)
        except BaseException:
            self.counters.aborted += 1
            raise
        self.counters.finished += 1
        finish = "length" if len(words) < self.tokens else "stop"
        prompt_tokens = len(_prompt_text(request).split())
        yield Chunk(finish_reason=finish, usage=Usage(prompt_tokens, sent))
