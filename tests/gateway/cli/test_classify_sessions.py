"""``tiergate classify`` and ``eval-classifier`` read agent sessions: rows sharing a
``session`` (or a conversation's stable prefix) are its turns, in order, routed as the
gateway routes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.harness.agent_sessions import session
from tests.gateway.cli.test_classify_cli import tiergate

pytestmark = pytest.mark.slow

TASKS = (
    "Say hello in Spanish.",
    "Implement a lock-free multi-producer multi-consumer queue in C++ with std::atomic, and "
    "justify every memory_order you use.",
)


def rows() -> list[dict[str, Any]]:
    """Two agent sessions of six turns (derived sessions), interleaved, the second's last
    turn sent again; and a named session whose second instruction is new."""
    out: list[dict[str, Any]] = []
    turns = [session(task, 5, seed) for seed, task in enumerate(TASKS)]
    for k in range(6):
        for i, conversation in enumerate(turns):
            out.append({"id": f"s{i}-t{k}", "messages": conversation[k]})
    out.append({"id": "s1-again", "messages": turns[1][5]})
    out.append({"id": "n-1", "session": "named", "prompt": "Translate 'cat' into French."})
    out.append({"id": "n-2", "session": "named", "prompt": "Thanks!", "signal": "bad verdict"})
    out.append({"id": "n-3", "session": "named", "prompt": "Spell the word apple."})
    return out


def classify(tmp: Path, lines: list[dict[str, Any]], *extra: str) -> dict[str, dict[str, Any]]:
    source = tmp / "turns.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in lines))
    done = tiergate("classify", str(source), *extra)
    assert done.returncode == 0, done.stderr
    return {o["id"]: o for o in map(json.loads, done.stdout.splitlines())}


def test_classify_routes_agent_turns_as_sessions(tmp_path: Path) -> None:
    out = classify(tmp_path, rows())
    for i in range(2):
        turns = [out[f"s{i}-t{k}"] for k in range(6)]
        assert [t["turn"] for t in turns] == list(range(1, 7))
        assert len({t["session"] for t in turns}) == 1
        # no signal: the session keeps the tier its task was given
        assert {t["tier"] for t in turns} == {turns[0]["tier"]}
        assert not any(t["moved"] for t in turns) and "stays on" in turns[3]["reason"]
    assert out["s0-t0"]["session"] != out["s1-t0"]["session"]
    again, last = out["s1-again"], out["s1-t5"]
    assert again["turn"] == 7 and "retried turn" in again["reason"]
    if last["tier"] != "large":
        assert again["moved"] and again["tier"] != last["tier"]
    named = [out[f"n-{k}"] for k in (1, 2, 3)]
    assert [n["turn"] for n in named] == [1, 2, 3] and len({n["session"] for n in named}) == 1
    # the row with a signal is routed as it comes; the next turn escalates
    assert "bad verdict" in named[2]["reason"] and named[2]["moved"]


def test_without_sessions_every_turn_is_routed_alone(tmp_path: Path) -> None:
    config = tmp_path / "off.yaml"
    shipped = (Path(__file__).resolve().parents[3] / "config" / "gateway.yaml").read_text()
    config.write_text(
        shipped.replace("\n  default_tier: small\n", "\n  default_tier: small\n  sessions: null\n")
    )
    out = classify(tmp_path, rows(), "--config", str(config))
    assert all(
        set(o) == {"id", "score", "tier", "quality", "lambda", "among"} for o in out.values()
    )
