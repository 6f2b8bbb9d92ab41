"""A session's tier, turn after turn: kept, unless a failure or a gain moves it.

A session is decided once on its task (``routers.session``), under the operator's
objective like any request. Each later turn stays on the session's tier unless

* a **failure signal** came from the last turn (the same turn sent again, a bad
  ``/v1/feedback`` verdict, a tool call the engine could not form, an answer cut by
  ``length`` inside a tool call): the session moves one permitted tier up, and gain
  moves keep it there or above until a new instruction; or
* another tier's **objective value** beats the current tier's once the switch is priced:
  value = P(acceptable) - λ · cost / the largest tier's cold cost, where the current
  tier's cost counts the prefix it already caches at the ``cached_input`` price and any
  other tier pays full input on the whole context (``keep_or_switch``).

A later turn reuses the prediction of the session's current instruction (a tool result
tells nothing new about the task); a new user message is predicted afresh. The state
replicas share is ``SessionState`` (JSON, a few hundred bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from routers.objective import below_segment
from routers.session import SessionKey

MAX_TRAIL = 8  # the latest moves a session keeps for /v1/route


@dataclass(frozen=True, slots=True)
class SessionState:
    tier: str
    quality: tuple[float, ...]  # per configured tier, P(acceptable) of the current instruction
    instruction: str  # digest of the user message it was predicted on
    turns: int
    moves: int
    floor: str | None  # escalated to: gain moves keep the session at or above it
    chars: int  # the last turn's conversation: its prefix is cached on ``tier``
    at: float  # when the last turn was routed (epoch seconds)
    last_turn: str  # the last turn's digest: the same turn again is a retry
    trail: tuple[str, ...] = ()  # the latest moves, newest last

    def encode(self) -> bytes:
        return orjson.dumps(
            [
                self.tier,
                list(self.quality),
                self.instruction,
                self.turns,
                self.moves,
                self.floor,
                self.chars,
                self.at,
                self.last_turn,
                list(self.trail),
            ]
        )

    @classmethod
    def decode(cls, raw: bytes | None) -> SessionState | None:
        """None for nothing stored, or a record of another shape (an older release)."""
        if raw is None:
            return None
        try:
            tier, quality, instruction, turns, moves, floor, chars, at, last, trail = orjson.loads(
                raw
            )
            return cls(
                str(tier),
                tuple(float(q) for q in quality),
                str(instruction),
                int(turns),
                int(moves),
                None if floor is None else str(floor),
                int(chars),
                float(at),
                str(last),
                tuple(str(t) for t in trail),
            )
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return None

    def moved_to(self, tier: str, why: str) -> SessionState:
        return replace(self, tier=tier, moves=self.moves + 1, trail=(*self.trail, why)[-MAX_TRAIL:])


@dataclass(frozen=True, slots=True)
class Move:
    """A later turn's tier: the session's, or where a failure or a gain moves it."""

    tier: str
    reason: str
    moved: bool
    floor: str | None = None  # an escalation's tier


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """A request's session as routing left it: what the run, the headers and
    ``/v1/route`` read."""

    key: SessionKey
    turn: int  # 1 for the task
    tier: str  # the session's tier after this turn
    reason: str  # why it is there (new, stays, moves)
    moved: bool
    cached_chars: int  # the prefix priced at ``cached_input`` on that tier
    replica: str | None = None  # the replica that served its last turn on ``tier``

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.key.short,
            "source": self.key.source,
            "turn": self.turn,
            "tier": self.tier,
            "moved": self.moved,
            "reason": self.reason,
            "cached_prefix_chars": self.cached_chars,
        }


def escalation(tiers: Sequence[str], current: str, permitted: Sequence[str]) -> str | None:
    """The next permitted tier above ``current`` (None: it is the top one)."""
    order = list(tiers)
    above = [t for t in order[order.index(current) + 1 :] if t in permitted]
    return above[0] if above else None


def values(
    quality: Sequence[float], cost: Sequence[float], scale: float, lam: float
) -> list[float]:
    """The objective's value of each tier for this turn: quality - λ · cost / ``scale``."""
    return [q - (lam * c / scale if scale > 0 else 0.0) for q, c in zip(quality, cost, strict=True)]


def keep_or_switch(
    tiers: Sequence[str],
    current: str,
    quality: Sequence[float],
    cost: Sequence[float],
    scale: float,
    lam: float,
    allowed: Sequence[int],
    floor: str | None = None,
) -> Move:
    """Stay on ``current`` unless an allowed tier (at or above ``floor``) has a higher
    value. ``cost``: this turn on each tier, ``current``'s cached prefix at the cached
    price and every other tier's whole context at full price, so the gain must pay for
    the switch; ``scale``: the largest tier's cold cost, the unit λ was learnt in."""
    order = list(tiers)
    here = order.index(current)
    lowest = order.index(floor) if floor in order else 0
    value = values(quality, cost, scale, lam)
    rivals = [i for i in allowed if i != here and i >= lowest]
    best = max(rivals, key=lambda i: (value[i], -cost[i]), default=None)
    if best is None or value[best] <= value[here] + 1e-12:
        gap = "" if best is None else f", best rival {order[best]} {value[best] - value[here]:+.4f}"
        return Move(current, f"stays on {current} (value {value[here]:.4f}{gap})", False)
    gain = value[best] - value[here]
    reason = f"moves {current} -> {order[best]}: objective gain {gain:+.4f} after the switch cost"
    return Move(order[best], reason, True)


def movable_tiers(
    quality: Sequence[float],
    cost: Sequence[float],
    scale: float,
    lam: float,
    allowed: Sequence[int] | None,
    dominance: bool,
) -> list[int]:
    """The tiers a later turn may move to: the objective's segment and, with
    ``dominance``, the tier below it its predictions say is no worse than the segment's
    cheapest (``routers.objective.below_segment``)."""
    among = sorted(allowed) if allowed else list(range(len(quality)))
    if dominance and allowed:
        below = below_segment(quality, cost, values(quality, cost, scale, lam), among[0])
        if below not in among:
            among.insert(0, below)
    return among
