"""``eval-classifier`` scores sessions as the gateway routes them: rows sharing a session
(an operator row's ``session``, else a conversation's stable prefix) are its turns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.harness.agent_sessions import session
from routers.objective import Objective
from routers.training.datasets import Example, load_operator
from routers.training.quality_fit import LADDER
from routers.training.tier_sets import run_policy, tier_set


def examples() -> list[Example]:
    """Two agent sessions of six turns each, with RouterBench's three models' correctness."""
    rows = []
    for seed, task in enumerate(("Say hello in Spanish.", "Prove the parser terminates.")):
        for messages in session(task, 5, seed):
            scores = {LADDER[0]: 0.0, LADDER[1]: 1.0, LADDER[2]: 1.0}
            rows.append(Example(tuple(messages), 1.0, 1.0, "agent", "operator", scores=scores))
    return rows


def test_later_turns_keep_their_sessions_tier_whatever_their_own_prediction() -> None:
    rows = tier_set("agents", examples())
    assert rows.models == LADDER  # an operator's rows scored on RouterBench's ladder
    quality = np.tile([0.70, 0.80, 0.83], (12, 1))
    # the turns' own predictions drift towards the large tier as the context grows
    quality[:, 2] += np.tile(np.linspace(0.0, 0.12, 6), 2)
    objective = Objective("quality", 0.95, segment=False)
    alone = run_policy(quality, rows, objective, min_samples=1, sessions=False)
    assert alone.point.shares[2] > 0  # routed alone, the later turns climb
    reference = (np.asarray([[0.70, 0.80, 0.83]] * 50), np.full(50, 300.0))
    kept = run_policy(quality, rows, Objective("quality", 0.95, segment=False), 200, reference)
    # both tasks predict the same: each session, every turn, stays where its task went
    assert sorted(kept.point.shares) == [0.0, 0.0, 1.0]
    assert kept.point.shares != alone.point.shares


def test_operator_rows_carry_their_session(tmp_path: Path) -> None:
    data = tmp_path / "turns.jsonl"
    data.write_text(
        '{"prompt": "a", "label": 0, "session": "s1"}\n'
        '{"prompt": "b", "label": 1, "session": "s1"}\n'
        '{"prompt": "c", "label": 1}\n'
    )
    loaded = load_operator(data)
    assert [e.session for e in loaded] == ["s1", "s1", None]
