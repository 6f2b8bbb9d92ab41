"""The configured ``auto`` policy over a batch of agent turns, session by session.

What ``tiergate classify`` prints when ``routing.sessions`` is on (and the objective
routes): the rows are the recent traffic, in order; rows of one session (a ``session``
field, else the conversation's stable prefix) are its turns. As in the gateway, the
rows are the traffic λ and the objective's hull segment are learnt from (``target.
min_samples`` or more of them, else the reference traffic's), each by the prediction it
is routed by (its session's task, or its latest instruction); each task row goes where
the objective sends it, and later turns stay unless a failure signal or a gain larger
than the switch cost moves them (``routers/session_replay.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from policies.schema import GatewayConfig
from routers.objective import objective_of, route_operating
from routers.objective_lambda import reference_operating
from routers.session_replay import TASK, PlannedTurn, replay, routed_by
from routers.tier_costs import expected_costs, prefix_costs


def session_tiers(
    config: GatewayConfig,
    planned: Sequence[PlannedTurn],
    fresh: Sequence[Sequence[float] | None],
    reference: tuple[Any, Any] | None = None,
    signals: Sequence[str | None] | None = None,
) -> list[dict[str, Any]]:
    """Per row ``{"tier", "lambda", "among", "session", "turn", "moved", "reason"}``;
    ``fresh``: the per-tier prediction of each task and instruction row (None for the
    others)."""
    objective = config.routing.objective
    assert objective is not None, "sessions are routed by the objective"
    tiers = list(config.tiers)
    quality = np.asarray(routed_by(planned, fresh), dtype=np.float64).reshape(-1, len(tiers))
    cost = np.asarray([expected_costs(config, objective, p.chars) for p in planned])
    picked, where = route_operating(
        quality,
        cost.reshape(-1, len(tiers)),
        objective_of(objective),
        config.routing.target.min_samples,
        reference_operating(config, reference),
    )
    chosen = {i: int(t) for i, t in enumerate(picked) if planned[i].kind == TASK}

    def costs(chars: int, cached: Mapping[int, int]) -> list[float]:
        held = {tiers[t]: n for t, n in cached.items()}
        return prefix_costs(config, objective, chars, held)

    lam = None if where is None else where.lam
    allowed = None if where is None else where.allowed
    turns = replay(planned, fresh, chosen, tiers, costs, lam, allowed, signals, objective.dominance)
    among = list(tiers) if allowed is None else [tiers[t] for t in allowed]
    return [
        {
            "tier": tiers[turn.tier],
            "lambda": lam,
            "among": among,
            "session": row.key.short,
            "turn": row.turn,
            "moved": turn.moved,
            "reason": turn.reason,
        }
        for row, turn in zip(planned, turns, strict=True)
    ]
