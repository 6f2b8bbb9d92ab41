"""One request's guard, from the screen to the edge.

``screen`` (``gateway.guardrails.screen``) makes it with the request's redactions; the
``Run`` passes each engine stream through ``stream``: a remote tier is refused to a
``local`` request (as an unavailable engine, so failover goes on along the chain to a
local one or ends), and the answer goes through the window (``gateway.guardrails.answer``).
At the edge, ``restored`` gives the caller back the values behind this request's
placeholders (``restore``), after the cache and the stores took the redacted answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from backends.base import Chunk
from backends.errors import EngineUnavailable
from backends.registry import BACKENDS
from gateway.guardrails.answer import guard_answer
from gateway.guardrails.redactor import Redactor
from gateway.telemetry.metrics import GatewayMetrics
from policies.schema import GatewayConfig

MAX_PLACEHOLDER = 24  # ``<PRIVATE_KEY_999>`` and then some: a "<" this close to the end waits


def in_process(config: GatewayConfig, tier: str) -> bool:
    """Every engine of ``tier`` runs in this process or on this machine (fake, llama.cpp,
    vLLM, SGLang); a remote provider (``openai``, ``litellm``) is not."""
    return all(BACKENDS[config.engines[e].backend].in_process for e in config.tiers[tier].engines)


class RequestGuard:
    def __init__(
        self,
        redactor: Redactor,
        config: GatewayConfig,
        screen_s: float,
        metrics: GatewayMetrics | None = None,
        tenant: str = "",
    ) -> None:
        self.redactor = redactor
        self.config = config
        self.screen_s = screen_s  # how long the request's screen took
        self.metrics, self.tenant = metrics, tenant
        # what ``restore`` gives back: the caller's own values, as the screen found them
        # (a value the window finds in the answer is the model's: it stays redacted)
        self.sent = dict(redactor.values)

    @property
    def local(self) -> bool:
        return self.redactor.local

    @property
    def restores(self) -> bool:
        return self.redactor.policy.restore and bool(self.sent)

    def admits(self, tier: str) -> bool:
        """Whether ``tier`` may receive this request (a ``local`` one: in-process only)."""
        return not self.local or in_process(self.config, tier)

    def stream(self, tier: str, stream: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
        if not self.admits(tier):
            return _refused(tier, stream)
        return self.answer(stream)

    def answer(self, stream: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
        """The answer through the window (``answer: false``: as it comes)."""
        spec = self.redactor.policy.spec
        if not spec.answer:
            return stream
        return guard_answer(stream, self.redactor, spec.window_chars, self._answered)

    def _answered(self) -> None:
        """The answer's window has ended: what it found is counted (once per stream)."""
        counts = self.redactor.counts
        if self.metrics is not None and counts:
            self.metrics.guarded(self.tenant, counts, "answer")
        counts.clear()

    async def restored(self, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
        """The answer with this request's placeholders turned back into the caller's values
        (a placeholder cut across chunks waits for its end)."""
        sent, pending = self.sent, ""
        async for chunk in chunks:
            text = pending + chunk.text
            pending = ""
            final = chunk.finish_reason is not None or chunk.usage is not None
            start = text.rfind("<")
            if not final and start >= 0 and ">" not in text[start:]:
                if len(text) - start < MAX_PLACEHOLDER:
                    text, pending = text[:start], text[start:]
            calls, deltas = chunk.tool_calls, chunk.tool_call_deltas
            if calls is not None:
                calls = tuple(_restore_call(sent, c) for c in calls)
            if deltas is not None:
                deltas = tuple(_restore_call(sent, d) for d in deltas)
            if not text and not final and chunk.text and deltas is None:
                continue  # all of it waits for the placeholder's end
            text = restore(sent, text)
            yield replace(chunk, text=text, tool_calls=calls, tool_call_deltas=deltas)
        if pending:
            yield Chunk(text=restore(sent, pending))


def restore(sent: Mapping[str, str], text: str) -> str:
    """``text`` with the caller's placeholders turned back into its values."""
    if "<" not in text:
        return text
    for placeholder, value in sent.items():
        if placeholder in text:
            text = text.replace(placeholder, value)
    return text


def _restore_call(sent: Mapping[str, str], call: Mapping[str, Any]) -> dict[str, Any]:
    whole = dict(call)
    function = whole.get("function")
    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
        whole["function"] = {**function, "arguments": restore(sent, function["arguments"])}
    return whole


async def _refused(tier: str, stream: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    """Never started: the remote tier receives nothing of a ``local`` request."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
    raise EngineUnavailable(f"guardrail: tier {tier!r} is remote and this request is local")
    yield Chunk()  # pragma: no cover - makes this an async generator
