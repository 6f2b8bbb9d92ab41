"""A finished response as the cache keeps it: the chunks as the engine sent them.

Replaying the chunks through the same wire builders gives a hit the exact shape of a
live response, streamed or not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from backends.base import Chunk, Usage

# Only these endings mean the engine finished on its own; anything else is not stored.
COMPLETE_FINISH_REASONS = frozenset({"stop", "length", "tool_calls"})


@dataclass(frozen=True, slots=True)
class CachedResponse:
    texts: tuple[str, ...]
    finish_reason: str
    usage: Usage
    tool_calls: tuple[dict[str, Any], ...] | None
    model: str
    tier: str
    cost_usd: float
    stop_sequence: str | None = None

    def encode(self) -> bytes:
        stop = {"s": self.stop_sequence} if self.stop_sequence is not None else {}
        return orjson.dumps(
            {
                **stop,
                "t": self.texts,
                "f": self.finish_reason,
                "u": [
                    self.usage.prompt_tokens,
                    self.usage.completion_tokens,
                    self.usage.cached_tokens,
                ],
                "c": self.tool_calls,
                "m": self.model,
                "r": self.tier,
                "$": self.cost_usd,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> CachedResponse:
        data = orjson.loads(raw)
        calls = data["c"]
        return cls(
            texts=tuple(data["t"]),
            finish_reason=data["f"],
            usage=Usage(*data["u"]),
            tool_calls=tuple(calls) if calls is not None else None,
            model=data["m"],
            tier=data["r"],
            cost_usd=float(data["$"]),
            stop_sequence=data.get("s"),
        )

    async def replay(self) -> AsyncIterator[Chunk]:
        for text in self.texts:
            yield Chunk(text=text)
        yield Chunk(
            finish_reason=self.finish_reason,
            usage=self.usage,
            tool_calls=self.tool_calls,
            stop_sequence=self.stop_sequence,
        )


class Recorder:
    """Collects a live stream's chunks; ``finished`` only once a complete final chunk came."""

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._final: Chunk | None = None

    def add(self, chunk: Chunk) -> None:
        if self._final is not None:
            return
        if chunk.text:
            self._texts.append(chunk.text)
        if chunk.finish_reason is not None:
            self._final = chunk

    def finished(self, *, model: str, tier: str, cost_usd: float) -> CachedResponse | None:
        final = self._final
        if final is None or final.usage is None:
            return None
        if final.finish_reason not in COMPLETE_FINISH_REASONS:
            return None
        calls = tuple(dict(c) for c in final.tool_calls) if final.tool_calls else None
        return CachedResponse(
            texts=tuple(self._texts),
            finish_reason=final.finish_reason,
            usage=final.usage,
            tool_calls=calls,
            model=model,
            tier=tier,
            cost_usd=cost_usd,
            stop_sequence=final.stop_sequence,
        )
