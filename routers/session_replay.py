"""Sessions over a batch of requests in order: what ``tiergate classify`` and
``eval-classifier`` score, by the rules the gateway serves by.

Rows sharing a session (a ``session`` field, else the conversation's stable prefix,
``routers/session.py``) are its turns, in file order. ``plan_turns`` says what each row
is (a session's task, a new instruction, or a later turn) and what it is predicted on;
every row is traffic λ is learnt from, by the prediction its session routes it by
(``routed_by``), as in the gateway; ``replay`` then walks each session: its first
decision is the objective's on the task, and later turns stay unless a failure signal
(the same turn again, or a row's ``signal``) or an objective gain larger than the
switch cost moves them (``routers/session_policy.py``), the previous turn's context
priced as cached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from routers.session import (
    Message,
    SessionHint,
    SessionKey,
    conversation_chars,
    follow_up,
    instruction_digest,
    instruction_messages,
    session_key,
    task_messages,
    turn_digest,
)
from routers.session_policy import Move, escalation, keep_or_switch, movable_tiers

TASK, INSTRUCTION, LATER = "task", "instruction", "later"
RETRIED = "retried turn"


@dataclass(frozen=True, slots=True)
class PlannedTurn:
    key: SessionKey
    turn: int  # 1: the task
    kind: str  # task | instruction | later
    predict: tuple[Message, ...] | None  # what it is predicted on (None: its session's)
    chars: int
    digest: str


@dataclass(frozen=True, slots=True)
class ReplayedTurn:
    tier: int
    moved: bool
    reason: str


def plan_turns(
    conversations: Sequence[Sequence[Message]],
    hints: Sequence[SessionHint | None],
    tenant: str = "offline",
) -> list[PlannedTurn]:
    seen: dict[str, tuple[int, str]] = {}  # session id -> (turns, instruction digest)
    out = []
    for messages, hint in zip(conversations, hints, strict=True):
        key = session_key(tenant, hint, messages, None)
        instruction = instruction_digest(messages)
        before = seen.get(key.id)
        if before is not None and (key.explicit or follow_up(messages)):
            turns, predicted = before
            kind = INSTRUCTION if instruction != predicted else LATER
            predict = tuple(instruction_messages(messages)) if kind == INSTRUCTION else None
            turn = turns + 1
        else:
            kind, predict, turn = TASK, tuple(task_messages(messages)), 1
        seen[key.id] = (turn, instruction)
        chars = conversation_chars(messages)
        out.append(PlannedTurn(key, turn, kind, predict, chars, turn_digest(messages, None)))
    return out


def routed_by(
    planned: Sequence[PlannedTurn], fresh: Sequence[Sequence[float] | None]
) -> list[Sequence[float]]:
    """Each row's prediction as its session routes it: a task's or an instruction's own,
    a later turn its session's latest (what the gateway sketches every turn by)."""
    latest: dict[str, Sequence[float]] = {}
    out = []
    for row, quality in zip(planned, fresh, strict=True):
        if quality is not None:
            latest[row.key.id] = quality
        out.append(latest[row.key.id])
    return out


Costs = Callable[[int, Mapping[int, int]], Sequence[float]]  # (chars, {tier: cached}) -> USD


def replay(
    planned: Sequence[PlannedTurn],
    quality: Sequence[Sequence[float] | None],
    fresh_tiers: Mapping[int, int],
    tiers: Sequence[str],
    costs: Costs,
    lam: float | None,
    allowed: Sequence[int] | None,
    signals: Sequence[str | None] | None = None,
    dominance: bool = False,
) -> list[ReplayedTurn]:
    """Each row's tier. ``quality``: the fresh prediction of task and instruction rows
    (None for later rows); ``fresh_tiers``: the objective's choice for each task row (by
    row index), routed as the traffic; ``signals``: a failure after a row, read by its
    session's next turn."""
    state: dict[str, tuple[int, tuple[float, ...], int, int | None]] = {}  # tier, q, chars, floor
    pending: dict[str, str] = {}
    last: dict[str, str] = {}
    out = []
    for i, row in enumerate(planned):
        sid = row.key.id
        if row.kind == TASK or sid not in state:
            tier = fresh_tiers[i]
            out.append(ReplayedTurn(tier, False, "decided on its task"))
            state[sid] = (tier, tuple(quality[i] or ()), row.chars, None)
        else:
            here, kept, cached, floor = state[sid]
            q = tuple(quality[i] or kept) if row.kind == INSTRUCTION else kept
            floor = None if row.kind == INSTRUCTION else floor
            signal = pending.pop(sid, None) or (RETRIED if last.get(sid) == row.digest else None)
            cost, scale = costs(row.chars, {here: cached}), costs(row.chars, {})[-1]
            among = movable_tiers(q, cost, scale, lam or 0.0, allowed, dominance)
            move = _move(tiers, here, q, cost, scale, lam, among, floor, signal)
            tier = tiers.index(move.tier)
            floor = tiers.index(move.floor) if move.floor is not None else floor
            out.append(ReplayedTurn(tier, move.moved, move.reason))
            state[sid] = (tier, q, row.chars, floor)
        last[sid] = row.digest
        if signals is not None and signals[i]:
            pending[sid] = str(signals[i])
    return out


def _move(
    tiers: Sequence[str],
    here: int,
    quality: Sequence[float],
    cost: Sequence[float],
    scale: float,
    lam: float | None,
    allowed: Sequence[int],
    floor: int | None,
    signal: str | None,
) -> Move:
    current = tiers[here]
    if signal is not None:
        up = escalation(tiers, current, tiers)
        if up is None:
            return Move(current, f"{signal}, and {current} is the top tier: stays", False)
        return Move(up, f"escalates {current} -> {up} ({signal})", True, up)
    if lam is None or len(quality) != len(tiers):
        return Move(current, f"stays on {current}", False)
    lowest = None if floor is None else tiers[floor]
    return keep_or_switch(tiers, current, quality, cost, scale, lam, allowed, lowest)
