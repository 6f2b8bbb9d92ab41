"""The answer's guard: text is released only after it was checked with what is around it.

The engine's text collects in a buffer; what is released is the buffer up to
``window_chars`` before its end, moved back so that the cut never falls inside a word
(a value without spaces, an e-mail or a key, is held until the space after it) nor
inside a value found (a card number in groups of four, an IBAN). Every value shorter
than the window that starts before the cut is therefore whole in the buffer when it is
checked, wherever the engine's chunks cut it; the released part is redacted and passed
on. The scan also sees the last released characters, so ``Bearer`` + token still reads
as one. Time to the first byte grows by the window (about ``window_chars`` / 4 tokens).

Tool calls are held until the stream ends and sent whole, their arguments redacted.
A ``block`` rule that matches the answer raises ``GuardrailBlocked`` mid-stream: the
wire format ends the stream with its error event (docs/guardrails.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from backends.base import Chunk
from gateway.guardrails.errors import GuardrailBlocked
from gateway.guardrails.recognizers import Finding
from gateway.guardrails.redactor import Redactor

CONTEXT_CHARS = 64  # of released text, scanned again for what begins a value (Bearer …)
RUN_LIMIT = 16  # a word longer than this many windows is cut anyway (base64, minified code)


class AnswerWindow:
    def __init__(self, redactor: Redactor, window: int) -> None:
        self.redactor = redactor
        self.window = window
        self.buffer = ""
        self.tail = ""  # the last released characters, as the engine wrote them

    async def feed(self, text: str | None) -> str:
        """``text`` in, what may be released out; None: the end (release the rest)."""
        return self.step(text)

    def step(self, text: str | None) -> str:
        if text is None:
            return self.flush()
        self.buffer += text
        if len(self.buffer) <= self.window:
            return ""
        return self._release(final=False)

    def flush(self) -> str:
        return self._release(final=True) if self.buffer else ""

    def _release(self, final: bool) -> str:
        buffer, off = self.buffer, len(self.tail)
        found = self._found(self.tail + buffer, off)
        cut = len(buffer) if final else self._cut(buffer, found)
        if cut <= 0:
            return ""
        released = buffer[:cut]
        inside = [f for f in found if f.end <= cut]
        try:
            out = self.redactor.apply(released, inside) if inside else released
        except GuardrailBlocked as exc:
            raise GuardrailBlocked(exc.detector, answer=True) from None
        self.tail = (self.tail + released)[-CONTEXT_CHARS:]
        self.buffer = buffer[cut:]
        return out

    def _found(self, scan: str, off: int) -> list[Finding]:
        policy = self.redactor.policy
        try:
            found = policy.find(scan)
            if policy.ner:
                from gateway.guardrails.ner import names_and_places

                found = names_and_places(policy, scan, found)
        except Exception as exc:  # a detector's failure: the stream ends, or (fail_open) goes on
            self.redactor.detector_failed(exc, "the answer", "the rest was not sent")
            found = []
        # in the buffer's offsets; a value begun in the released context keeps its rest
        return [
            Finding(f.kind, max(f.start - off, 0), f.end - off, f.value)
            for f in found
            if f.end > off
        ]

    def _cut(self, buffer: str, found: list[Finding]) -> int:
        cut = len(buffer) - self.window
        if cut <= 0:
            return 0
        floor = cut - self.window * RUN_LIMIT
        while cut > 0 and cut > floor and not (buffer[cut - 1].isspace() or buffer[cut].isspace()):
            cut -= 1
        for finding in reversed(found):  # sorted by start: move left past each straddler
            if finding.start < cut < finding.end:
                cut = finding.start
        return max(cut, 0)


async def guard_answer(
    stream: AsyncIterator[Chunk],
    redactor: Redactor,
    window: int,
    ended: Callable[[], None] | None = None,  # told once the stream has ended, in any way
) -> AsyncIterator[Chunk]:
    """``stream`` with its text released through the window and its tool calls whole."""
    held = AnswerWindow(redactor, window)
    # Presidio's milliseconds a release run in a worker thread, never on the event loop
    feed = _threaded(held.step) if redactor.policy.ner else held.feed
    deltas: dict[int, dict[str, Any]] = {}
    done = False
    try:
        async for chunk in stream:
            if done:  # after the final chunk: nothing of the answer is left to check
                yield chunk
                continue
            for delta in chunk.tool_call_deltas or ():
                _merge(deltas, delta)
            if chunk.finish_reason is None and chunk.usage is None:
                text = await feed(chunk.text)
                if text:
                    yield Chunk(text=text)
                continue
            done = True
            text = await feed(chunk.text)
            text += await feed(None)
            calls = chunk.tool_calls
            if calls is not None:
                calls = tuple(redactor.walk(dict(c), "tool_calls") for c in calls)
            whole = tuple(redactor.walk(d, "tool_calls") for _, d in sorted(deltas.items()))
            yield replace(
                chunk,
                text=text,
                tool_calls=calls,
                tool_call_deltas=whole or None,
                logprobs=None,  # a token's log-probability no longer matches its text
            )
        if not done:
            rest = await feed(None)
            if rest:
                yield Chunk(text=rest)
    finally:
        if ended is not None:
            ended()
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _threaded(step: Callable[[str | None], str]) -> Callable[[str | None], Awaitable[str]]:
    async def feed(text: str | None) -> str:
        return await asyncio.to_thread(step, text)

    return feed


def _merge(deltas: dict[int, dict[str, Any]], delta: Mapping[str, Any]) -> None:
    """One call's fragments as one delta: its id, type and name, its arguments joined."""
    index = int(delta.get("index", 0))
    whole = deltas.setdefault(index, {"index": index})
    for key in ("id", "type"):
        if delta.get(key):
            whole[key] = delta[key]
    function = delta.get("function") or {}
    into = whole.setdefault("function", {})
    if function.get("name"):
        into["name"] = function["name"]
    into["arguments"] = into.get("arguments", "") + (function.get("arguments") or "")
