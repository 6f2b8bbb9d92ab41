"""Which requests get a shadow answer, and how many shadows may run at once.

The decision is made when a request starts (a sampled one collects its answer's text in
a ``Tap``); at its end a shadow starts only if fewer than ``max_concurrent`` are running.
Under load the excess is dropped, never queued: a dropped shadow costs nothing.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

from policies.feedback_spec import FeedbackConfig

MAX_ANSWER_CHARS = 32_000  # of a served answer kept for the judge (the judge cuts it further)


class Tap:
    """The served answer's text, as it streams past."""

    __slots__ = ("_parts", "_size")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0

    def add(self, text: str) -> None:
        if text and self._size < MAX_ANSWER_CHARS:
            self._parts.append(text)
            self._size += len(text)

    @property
    def text(self) -> str:
        return "".join(self._parts)[:MAX_ANSWER_CHARS]


class ShadowSampler:
    def __init__(self, draw: Callable[[], float] = random.random) -> None:
        self._draw = draw
        self.in_flight = 0
        self.sampled = 0
        self.dropped = 0  # sampled, but max_concurrent shadows were running

    def tap(
        self, spec: FeedbackConfig | None, requested_model: str, classified: bool
    ) -> Tap | None:
        """A tap when this request is sampled: a classified ``auto`` request, at ``sample``."""
        if spec is None or not classified or requested_model != "auto" or spec.sample <= 0:
            return None
        if self._draw() >= spec.sample:
            return None
        self.sampled += 1
        return Tap()

    def admit(self, spec: FeedbackConfig) -> bool:
        """Room for one more shadow now? (The caller releases it when done.)"""
        if self.in_flight >= spec.max_concurrent:
            self.dropped += 1
            return False
        self.in_flight += 1
        return True

    def release(self) -> None:
        self.in_flight -= 1


def shadow_tier(tiers: list[str], served: str, request_id: str) -> str:
    """The tier a served answer is compared with: one of the other tiers, evenly, picked
    by the request id (reproducible). Not only the neighbour: the judge labels both
    answers, and a tier the policy seldom serves (the smallest, under a quality objective)
    is then labelled as often as any, so a refit sees every tier's quality on this traffic."""
    others = [t for t in tiers if t != served]
    return others[zlib.crc32(request_id.encode()) % len(others)]
