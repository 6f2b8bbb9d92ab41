"""Sessions without a gateway: names, tasks, the switch rule, and the offline replay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from routers.session import (
    SessionHint,
    follow_up,
    instruction_messages,
    session_key,
    task_messages,
    turn_digest,
    user_turns,
)
from routers.session_policy import SessionState, escalation, keep_or_switch, movable_tiers
from routers.session_replay import INSTRUCTION, LATER, TASK, plan_turns, replay

TIERS = ("small", "medium", "large")
SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK_MSG = {"role": "user", "content": "Fix the failing test in parser.py"}
TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]


def call(i: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "run", "arguments": f'{{"n": {i}}}'},
            }
        ],
    }


def result(i: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": f"output of round {i} " * 20}


def conversation(rounds: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM, TASK_MSG]
    for i in range(rounds):
        messages += [call(i), result(i)]
    return messages


def test_a_conversation_keeps_its_derived_name_as_it_grows() -> None:
    first = session_key("acme", None, conversation(0), TOOLS)
    later = session_key("acme", None, conversation(4), TOOLS)
    assert first == later and first.source == "prefix" and not first.explicit
    # another tenant, other tools, another task, another system prompt: another session
    assert session_key("globex", None, conversation(0), TOOLS) != first
    assert session_key("acme", None, conversation(0), None) != first
    other = [SYSTEM, {"role": "user", "content": "Add a --verbose flag"}]
    assert session_key("acme", None, other, TOOLS) != first
    assert session_key("acme", None, [{"role": "system", "content": "x"}, TASK_MSG], TOOLS) != first


def test_explicit_names_stand_alone_and_a_person_scopes_the_derived_one() -> None:
    header = SessionHint("header", "abc")
    a = session_key("acme", header, conversation(0), TOOLS)
    b = session_key("acme", header, [{"role": "user", "content": "unrelated"}], None)
    assert a == b and a.explicit and a.source == "header"
    assert session_key("globex", header, conversation(0), TOOLS) != a  # scoped by tenant
    cache_key = session_key("acme", SessionHint("prompt_cache_key", "abc"), conversation(0), None)
    assert cache_key != a and cache_key.explicit
    alice = session_key("acme", SessionHint("user", "alice"), conversation(0), TOOLS)
    bob = session_key("acme", SessionHint("user", "bob"), conversation(0), TOOLS)
    derived = session_key("acme", None, conversation(0), TOOLS)
    assert len({alice, bob, derived}) == 3 and not alice.explicit
    assert session_key("acme", SessionHint("user", "alice"), conversation(3), TOOLS) == alice
    # a Responses chain carries the session id its first response was kept with
    chained = session_key("acme", SessionHint("response", derived.id), conversation(5), None)
    assert chained.id == derived.id and chained.explicit


def test_task_instruction_and_turn_shape() -> None:
    messages = conversation(3)
    assert task_messages(messages) == [SYSTEM, TASK_MSG]
    assert user_turns(messages) == 1 and follow_up(messages)
    assert not follow_up(conversation(0))
    again = [*messages, {"role": "user", "content": "now add a test"}]
    assert instruction_messages(again) == [SYSTEM, again[-1]]
    assert turn_digest(messages, None) == turn_digest(list(messages), None)
    assert turn_digest(messages, None) != turn_digest(conversation(2), None)
    # the calls an assistant made are part of the turn
    changed = [
        *messages[:-2],
        {**call(2), "tool_calls": [{"function": {"name": "run", "arguments": "{}"}}]},
        messages[-1],
    ]
    assert turn_digest(changed, None) != turn_digest(messages, None)


def test_state_round_trips_and_a_foreign_record_reads_as_none() -> None:
    state = SessionState("medium", (0.7, 0.75, 0.9), "i" * 32, 3, 0, None, 4000, 1.7e9, "d" * 32)
    assert SessionState.decode(state.encode()) == state
    moved = state.moved_to("large", "turn 4: escalates")
    assert moved.moves == 1 and moved.trail == ("turn 4: escalates",) and moved.tier == "large"
    assert SessionState.decode(b'{"tier": "x"}') is None and SessionState.decode(None) is None


def test_escalation_goes_one_permitted_tier_up() -> None:
    assert escalation(TIERS, "small", TIERS) == "medium"
    assert escalation(TIERS, "small", ("small", "large")) == "large"
    assert escalation(TIERS, "large", TIERS) is None


def test_a_gain_must_pay_for_the_switch() -> None:
    quality = (0.70, 0.80, 0.86)
    cold = [1.0, 10.0, 50.0]
    lam = 0.1
    # on medium, a rival is compared with medium's turn at its cached price
    stay = keep_or_switch(TIERS, "medium", quality, [1.0, 6.0, 50.0], 50.0, lam, [1, 2])
    assert not stay.moved and stay.tier == "medium"
    # the same predictions, priced as if medium were cold, would not move either; a large
    # enough quality gap on large does, even though large pays full input on everything
    sharper = (0.70, 0.60, 0.95)
    move = keep_or_switch(TIERS, "medium", sharper, [1.0, 6.0, 50.0], 50.0, lam, [1, 2])
    assert move.moved and move.tier == "large" and "gain" in move.reason
    # the gain is exactly the value difference: 0.95 - 0.1 - (0.60 - 0.1 * 6 / 50)
    assert f"{0.95 - 0.1 - (0.60 - 0.012):+.4f}" in move.reason
    # a floor (an escalation) keeps gain moves at or above it
    down = keep_or_switch(TIERS, "large", (0.9, 0.5, 0.5), cold, 50.0, 1.0, [0, 1, 2], "large")
    assert not down.moved


def test_dominance_adds_the_tier_below_the_segment_only_when_it_is_no_worse() -> None:
    cost, scale = [1.0, 10.0, 50.0], 50.0
    assert movable_tiers((0.7, 0.75, 0.9), cost, scale, 0.1, (1, 2), True) == [1, 2]
    assert movable_tiers((0.8, 0.75, 0.9), cost, scale, 0.1, (1, 2), True) == [0, 1, 2]
    assert movable_tiers((0.8, 0.75, 0.9), cost, scale, 0.1, (1, 2), False) == [1, 2]


def rows() -> tuple[list[list[Mapping[str, Any]]], list[SessionHint | None]]:
    agent = [conversation(i) for i in range(4)]
    other = [[{"role": "user", "content": "hi"}]] * 2  # the same single turn twice
    named = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    conversations = [agent[0], other[0], agent[1], named[0], agent[2], other[1], named[1], agent[3]]
    hints: list[SessionHint | None] = [None, None, None, SessionHint("header", "n")]
    hints += [None, None, SessionHint("header", "n"), None]
    return conversations, hints


def test_plan_groups_rows_into_sessions_in_order() -> None:
    conversations, hints = rows()
    planned = plan_turns(conversations, hints)
    agent = [planned[i] for i in (0, 2, 4, 7)]
    assert [p.turn for p in agent] == [1, 2, 3, 4] and len({p.key for p in agent}) == 1
    assert [p.kind for p in agent] == [TASK, LATER, LATER, LATER]
    assert agent[0].predict == (SYSTEM, TASK_MSG) and agent[1].predict is None
    # a derived single-turn conversation is a new task each time it comes
    assert planned[1].kind == planned[5].kind == TASK and planned[5].turn == 1
    # an explicit session's new user message is a new instruction
    assert planned[3].kind == TASK and planned[6].kind == INSTRUCTION and planned[6].turn == 2


def test_replay_keeps_sessions_and_escalates_on_signals_and_retries() -> None:
    conversations, hints = rows()
    conversations.append(conversations[7])  # the agent's last turn sent again: a retry
    hints.append(None)
    planned = plan_turns(conversations, hints)
    quality: list[list[float] | None] = [None] * len(planned)
    for i, p in enumerate(planned):
        if p.kind != LATER:
            quality[i] = [0.7, 0.75, 0.9]
    fresh = {i: 1 for i, p in enumerate(planned) if p.kind == TASK}

    def costs(chars: int, cached: Mapping[int, int]) -> list[float]:
        return [c * (0.5 if t in cached else 1.0) for t, c in enumerate([1.0, 10.0, 50.0])]

    signals: list[str | None] = [None] * len(planned)
    signals[2] = "bad feedback verdict"  # after the agent's second turn
    turns = replay(planned, quality, fresh, TIERS, costs, 0.5, [1, 2], signals)
    agent = [turns[i] for i in (0, 2, 4, 7, 8)]
    assert [t.tier for t in agent] == [1, 1, 2, 2, 2]
    assert agent[2].moved and "escalates medium -> large (bad feedback verdict)" in agent[2].reason
    assert not agent[1].moved and "stays on medium" in agent[1].reason
    assert not agent[3].moved  # the escalation's floor holds
    assert (
        not agent[4].moved and "retried turn" in agent[4].reason and "top tier" in agent[4].reason
    )
    # the named session's second instruction is predicted afresh, and may stay
    assert turns[6].tier == 1 and not turns[6].moved


def test_a_retry_escalates_from_a_lower_tier() -> None:
    messages = conversation(2)
    planned = plan_turns([conversation(1), messages, messages], [None] * 3)
    quality: list[list[float] | None] = [[0.7, 0.75, 0.9], None, None]

    def costs(chars: int, cached: Mapping[int, int]) -> list[float]:
        return [1.0, 10.0, 50.0]

    turns = replay(planned, quality, {0: 0}, TIERS, costs, 5.0, [0, 1])
    assert [t.tier for t in turns] == [0, 0, 1]
    assert "escalates small -> medium (retried turn)" in turns[2].reason


@pytest.mark.parametrize("lam", [None, 0.2])
def test_replay_without_signals_never_moves_a_session_on_its_own_predictions(
    lam: float | None,
) -> None:
    conversations = [conversation(i) for i in range(6)]
    planned = plan_turns(conversations, [None] * 6)
    quality: list[list[float] | None] = [[0.7, 0.75, 0.9]] + [None] * 5

    def costs(chars: int, cached: Mapping[int, int]) -> list[float]:
        base = [chars * 0.02, chars * 0.18, chars * 0.88]
        return [b * (0.5 if t in cached else 1.0) for t, b in enumerate(base)]

    turns = replay(planned, quality, {0: 1}, TIERS, costs, lam, [1, 2])
    assert [t.tier for t in turns] == [1] * 6 and not any(t.moved for t in turns)
