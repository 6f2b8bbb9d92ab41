"""Labelled rows as a deployment: tiers, per-row correctness and cost, the policy on them.

Each source's rows were scored on a ladder of models: RouterBench's three (with the cost
each charged), the golden sample's two, LLMRouter's cheapest and most expensive. A
``TierSet`` treats that ladder as the configured tiers, and ``run_policy`` routes its
rows with the objective policy exactly as ``tiergate classify`` does: the rows are the
recent traffic λ is learned from, the costs the policy expects come from prices and
prompt length (never from the rows' measured answers), and the accuracy and cost it is
charged are the measured ones where the source has them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from routers.features import message_text
from routers.objective import (
    Objective,
    Operating,
    route_operating,
    route_traffic,
    traffic_operating,
)
from routers.session import SessionHint
from routers.session_replay import LATER, TASK, PlannedTurn, plan_turns, replay, routed_by
from routers.training.datasets import GOLDEN_STRONG, GOLDEN_WEAK, Example
from routers.training.frontier import Point, fixed_points, hull_accuracy, point
from routers.training.quality_fit import LADDER

F64 = npt.NDArray[np.float64]

# USD per million tokens (input, output): RouterBench's own for its three models; the
# hosted 8B and 70B prices of issue 24's ladder for LLMRouter's (Nemotron-51B as a 70B).
PRICES: Mapping[str, tuple[float, float]] = {
    "mistral-7b-instruct": (0.2, 0.2),
    "mixtral-8x7b-instruct": (0.6, 0.6),
    "gpt-4-1106-preview": (10.0, 30.0),
    "llama-3.1-8b-instruct": (0.18, 0.18),
    "llama-3.1-nemotron-51b-instruct": (0.88, 0.88),
}
LLMROUTER_TIERS = ("llama-3.1-8b-instruct", "llama-3.1-nemotron-51b-instruct")
CHARS_PER_TOKEN = 4.0
ANSWER_TOKENS = 256  # what a tier is expected to write when nothing better is known
CACHED_SHARE = 0.1  # cached input at a tenth of the input price (OpenAI's and Anthropic's)


def prompt_tokens(chars: F64) -> F64:
    tokens: F64 = chars / CHARS_PER_TOKEN + 8.0
    return tokens


def expected_cost(
    chars: F64, prices: Sequence[tuple[float, float]], answer_tokens: Sequence[float]
) -> F64:
    """``(n, tiers)`` USD: input price x prompt tokens + output price x answer tokens."""
    tokens = prompt_tokens(np.asarray(chars, dtype=np.float64))[:, None]
    inputs = np.asarray([p[0] for p in prices])[None, :]
    outputs = np.asarray([p[1] for p in prices])[None, :]
    answers = np.asarray(answer_tokens, dtype=np.float64)[None, :]
    cost: F64 = (tokens * inputs + answers * outputs) / 1e6
    return cost


def ladder_of(example: Example) -> tuple[str, ...]:
    if example.source.startswith("RouterDC"):
        return LADDER
    if example.source == "golden":
        return (GOLDEN_WEAK, GOLDEN_STRONG)
    scored = set(example.scores or ())
    for ladder in (LADDER, (GOLDEN_WEAK, GOLDEN_STRONG)):  # an operator's rows: by their scores
        if example.source == "operator" and scored >= set(ladder):
            return ladder
    return LLMROUTER_TIERS


def chars(example: Example) -> float:
    return float(sum(len(message_text(m)) for m in example.messages))


@dataclass(frozen=True, slots=True)
class TierSet:
    name: str
    examples: tuple[Example, ...]
    models: tuple[str, ...]  # the tiers, cheapest first
    correct: F64  # (n, tiers)
    cost: F64  # what each tier charged (measured, else ``expected``)
    expected: F64  # what the policy expects each tier to charge
    lengths: F64  # prompt characters

    @property
    def fixed(self) -> list[Point]:
        return fixed_points(self.correct, self.cost)


def tier_set(name: str, examples: Sequence[Example]) -> TierSet:
    """Rows of one source (one ladder); measured costs where every row has them."""
    models = ladder_of(examples[0])
    correct = np.asarray(
        [[(e.scores or {})[m] for m in models] for e in examples], dtype=np.float64
    )
    lengths = np.asarray([chars(e) for e in examples], dtype=np.float64)
    expected = expected_cost(lengths, [PRICES[m] for m in models], [ANSWER_TOKENS] * len(models))
    measured = all(e.costs is not None for e in examples) and len(models) == 3
    cost = np.asarray([e.costs for e in examples], dtype=np.float64) if measured else expected
    return TierSet(name, tuple(examples), models, correct, cost, expected, lengths)


@dataclass(frozen=True, slots=True)
class PolicyResult:
    objective: Objective
    lam: float | None  # None: fewer rows than min_samples, each routed alone
    point: Point
    hull: float  # the fixed tiers' hull at the cost the policy spent

    @property
    def margin(self) -> float:
        return self.point.accuracy - self.hull


def run_policy(
    quality: F64,
    rows: TierSet,
    objective: Objective,
    min_samples: int = 200,
    reference: tuple[F64, F64] | None = None,
    sessions: bool = True,
) -> PolicyResult:
    """Route ``rows`` with predictions ``quality`` (n, tiers) under ``objective``;
    ``reference``: the quality model's reference traffic for these tiers (P, characters),
    whose λ applies to sets smaller than ``min_samples``, as in the gateway; ``sessions``
    (``routing.sessions``): rows of one session are routed as its turns."""
    prior = None
    if reference is not None and len(rows.examples) < min_samples:
        cost = expected_cost(
            reference[1], [PRICES[m] for m in rows.models], [ANSWER_TOKENS] * len(rows.models)
        )
        prior = traffic_operating(np.asarray(reference[0], dtype=np.float64), cost, objective)
    planned = plan_turns([e.messages for e in rows.examples], session_hints(rows.examples))
    fresh = [i for i, p in enumerate(planned) if p.kind != LATER]
    if not sessions or len(fresh) == len(planned):  # every row routed alone
        tiers, lam = route_traffic(quality, rows.expected, objective, min_samples, prior)
    else:
        tiers, lam = session_traffic(quality, rows, planned, fresh, objective, min_samples, prior)
    spent = point(tiers, rows.correct, rows.cost)
    return PolicyResult(objective, lam, spent, hull_accuracy(rows.fixed, spent.cost))


def session_hints(examples: Sequence[Example]) -> list[SessionHint | None]:
    """A row's session where the data names one, else its conversation's (derived)."""
    return [None if e.session is None else SessionHint("header", e.session) for e in examples]


def session_traffic(
    quality: F64,
    rows: TierSet,
    planned: Sequence[PlannedTurn],
    fresh: Sequence[int],
    objective: Objective,
    min_samples: int,
    prior: Operating | None,
) -> tuple[npt.NDArray[np.intp], float | None]:
    """Rows as agent turns, as the gateway routes them: every row is traffic λ is learnt
    from, by the prediction its session routes it by, and later turns stay on their
    session's tier unless a retry or a gain larger than the switch cost moves them; a
    session's cached prefix is billed at ``CACHED_SHARE`` of the input price. (A row's
    prediction is of its own messages; the gateway predicts a task on its system
    messages and first user message.)"""
    fresh_quality = [list(quality[i]) if i in set(fresh) else None for i in range(len(planned))]
    routed = np.asarray(routed_by(planned, fresh_quality), dtype=np.float64)
    picked, where = route_operating(routed, rows.expected, objective, min_samples, prior)
    chosen = {i: int(t) for i, t in enumerate(picked) if planned[i].kind == TASK}
    prices = [PRICES[m] for m in rows.models]

    def costs(chars: int, cached: Mapping[int, int]) -> list[float]:
        tokens = chars / CHARS_PER_TOKEN + 8.0
        out = []
        for t, (price_in, price_out) in enumerate(prices):
            held = min(cached.get(t, 0), chars) / CHARS_PER_TOKEN
            inputs = (tokens - held) * price_in + held * price_in * CACHED_SHARE
            out.append((inputs + ANSWER_TOKENS * price_out) / 1e6)
        return out

    lam = None if where is None else where.lam
    allowed = None if where is None else where.allowed
    turns = replay(
        planned, fresh_quality, chosen, rows.models, costs, lam, allowed, None, objective.dominance
    )
    return np.asarray([t.tier for t in turns], dtype=np.intp), lam
