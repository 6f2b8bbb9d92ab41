"""``routing.objective``: each request to the tier maximising expected quality - λ · cost.

Quality is the per-tier P(acceptable) of ``routers.quality``; cost is what the tier would
charge for this prompt (prices x prompt tokens + the tier's expected answer length),
weighed as a share of what the largest tier would charge for the same prompt. λ comes
from recent traffic (``routers.lambda_sketch``): the λ at which that traffic meets the
operator's objective, ``cost: s`` (each request spends, on average, at most ``s`` of
what the largest tier would charge for it) or ``quality: s`` (reach ``s`` of the largest
tier's expected quality at least cost). Until enough traffic is pooled each request
meets the objective on its own.

No signal, no gamble: where the predictions do not tell requests apart, every request
sees the same trade-off (a long prompt costs more on every tier, not more *relatively*),
so the policy sends them all to the one tier that is best for the objective — never a
share to the smallest tier by quota, nor the long prompts down by their price alone. And
requests only ever choose between the two tiers whose segment of the traffic's predicted
fixed-tier hull the objective falls on (``routers/objective_segment.py``): never across
a hull vertex on predictions too weak to justify it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import numpy.typing as npt

from policies.routing_spec import ObjectiveConfig
from routers.lambda_sketch import bin_of, cost_count, lambda_for, quality_count
from routers.objective_segment import pair_prefix, segment_lambda, tier_totals

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Objective:
    kind: str  # "cost" | "quality"
    share: float
    segment: bool = True  # choose within the objective's segment of the predicted hull
    # Below the segment where the request's own predictions dominate (``below_segment``).
    dominance: bool = False


@dataclass(frozen=True, slots=True)
class Operating:
    """Where the traffic puts the objective: λ and the tiers requests may go to."""

    lam: float
    allowed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TierChoice:
    """The objective's decision for one request (on the tier trail and ``/v1/route``)."""

    tiers: tuple[str, ...]
    quality: tuple[float, ...]  # P(acceptable) per tier
    cost: tuple[float, ...]  # expected USD per tier
    lam: float | None  # None: no λ pooled yet, the objective was met by this request alone
    tier: str
    reason: str
    allowed: tuple[str, ...] = ()  # the tiers it chose among (the objective's hull segment)


def objective_of(spec: ObjectiveConfig) -> Objective:
    """The configured objective as the router reads it."""
    return Objective(spec.kind, spec.share, spec.segment, spec.dominance)


def relative(cost: F64) -> F64:
    """Costs as shares of the row's largest tier (the last column)."""
    largest = cost[..., -1:]
    out: F64 = np.divide(cost, largest, out=np.zeros_like(cost), where=largest > 0)
    return out


def choose(
    quality: F64,
    cost: F64,
    lam: float,
    allowed: Sequence[int] | None = None,
    dominance: bool = False,
) -> npt.NDArray[np.intp]:
    """Per row the tier maximising ``quality - lam · cost share`` (ties: the cheaper tier),
    among the tiers ``allowed`` (default: all); ``dominance``: ``below_segment`` too."""
    full = quality - lam * relative(cost)
    value = full.copy()
    if allowed is not None:
        barred = np.ones(quality.shape[1], dtype=bool)
        barred[list(allowed)] = False
        value[:, barred] = -np.inf
    best = value.max(axis=1, keepdims=True)
    # the first tier (cheapest first) within float noise of the best
    picked: npt.NDArray[np.intp] = np.argmax(value >= best - 1e-12, axis=1)
    if dominance and allowed:
        low = min(allowed)
        for row in np.flatnonzero(picked == low):
            picked[row] = below_segment(quality[row], cost[row], full[row], low)
    return picked


def below_segment(
    quality: Sequence[float], cost: Sequence[float], value: Sequence[float], low: int
) -> int:
    """Where a request goes whose choice is the segment's cheapest tier ``low``: to a
    cheaper tier its own predictions say is no worse (P(acceptable) at least ``low``'s,
    at a lower cost) — the best valued of those — else ``low``. Its predicted quality
    never falls below what the segment gave it, and it costs less; so the traffic still
    meets the objective λ was learnt for. The segment guards against trading quality
    across a hull vertex on weak predictions; a request predicted no worse on the
    cheaper tier trades none."""
    better = [t for t in range(low) if quality[t] >= quality[low] - 1e-12 and cost[t] < cost[low]]
    if not better:
        return low
    return max(better, key=lambda t: (value[t], -t))


def steps(quality: Sequence[float], cost: Sequence[float]) -> list[tuple[float, float, float]]:
    """``(λ, cost drop, quality drop)`` where this request moves to a cheaper tier as λ grows
    from 0 (its start: the best quality, cheapest among equals)."""
    q, c = list(quality), list(cost)
    current = max(range(len(q)), key=lambda t: (q[t], -c[t]))
    out: list[tuple[float, float, float]] = []
    lam = 0.0
    while True:
        cheaper = [t for t in range(len(q)) if c[t] < c[current]]
        if not cheaper:
            return out
        ties = [(max((q[current] - q[t]) / (c[current] - c[t]), lam), c[t], t) for t in cheaper]
        lam, _, nxt = min(ties)
        out.append((lam, c[current] - c[nxt], q[current] - q[nxt]))
        current = nxt


def _shares(cost: Sequence[float]) -> list[float]:
    """``relative`` for one request, in plain floats (the request path)."""
    largest = cost[-1]
    return [c / largest if largest > 0 else 0.0 for c in cost]


def sketch_request(counts: Counter[str], quality: Sequence[float], cost: Sequence[float]) -> None:
    """Add one request's trade-offs (costs as shares of its largest tier) to a sketch: its
    breakpoints over all tiers, its per-tier totals, and (three tiers or more) each pair's
    breakpoints, which λ is read from once the objective's segment is known."""
    shares = _shares(cost)
    _sketch_core(counts, quality, shares)
    counts["n"] += 1
    tier_totals(counts, quality, shares)
    if len(quality) < 3:
        return
    for a, b in combinations(range(len(quality)), 2):
        # a pair's sketch, written out (the request path): it starts on the better of the
        # two (the cheaper among equals) and steps down to the cheaper at most once
        prefix = pair_prefix((a, b))
        (hq, hc), (lq, lc) = (quality[a], shares[a]), (quality[b], shares[b])
        if (lq, -lc) > (hq, -hc):
            (hq, hc), (lq, lc) = (lq, lc), (hq, hc)
        counts[prefix + "C0"] += cost_count(hc)
        counts[prefix + "Q0"] += quality_count(hq)
        if lc < hc:
            at = bin_of((hq - lq) / (hc - lc))
            counts[f"{prefix}c{at}"] += cost_count(hc - lc)
            counts[f"{prefix}q{at}"] += quality_count(hq - lq)


def _sketch_core(counts: Counter[str], quality: Sequence[float], cost: Sequence[float]) -> None:
    start = max(range(len(quality)), key=lambda t: (quality[t], -cost[t]))
    counts["C0"] += cost_count(cost[start])
    counts["Q0"] += quality_count(quality[start])
    counts["CL"] += cost_count(cost[-1])
    counts["QL"] += quality_count(quality[-1])
    for lam, dc, dq in steps(quality, cost):
        b = bin_of(lam)
        counts[f"c{b}"] += cost_count(dc)
        counts[f"q{b}"] += quality_count(dq)


def sketch_of(quality: F64, cost: F64) -> Counter[str]:
    counts: Counter[str] = Counter()
    for q, c in zip(quality, cost, strict=True):
        sketch_request(counts, [float(v) for v in q], [float(v) for v in c])
    return counts


def operating(fields: Mapping[str, int], tiers: int, objective: Objective) -> Operating:
    """λ and the allowed tiers for ``objective`` on a (pooled) sketch."""
    if not objective.segment:
        return Operating(lambda_for(fields, objective.kind, objective.share), tuple(range(tiers)))
    lam, allowed = segment_lambda(fields, tiers, objective.kind, objective.share)
    return Operating(lam, allowed)


def traffic_operating(quality: F64, cost: F64, objective: Objective) -> Operating:
    """λ and the allowed tiers for ``objective`` with these rows as the recent traffic
    (what ``classify`` and ``eval-classifier`` score: the same sketch the gateway pools)."""
    return operating(sketch_of(quality, cost), quality.shape[1], objective)


def traffic_lambda(quality: F64, cost: F64, objective: Objective) -> float:
    return traffic_operating(quality, cost, objective).lam


def route_traffic(
    quality: F64,
    cost: F64,
    objective: Objective,
    min_samples: int,
    reference: Operating | None = None,
) -> tuple[npt.NDArray[np.intp], float | None]:
    """``route_operating``'s tiers and λ (None: each row alone)."""
    tiers, where = route_operating(quality, cost, objective, min_samples, reference)
    return tiers, None if where is None else where.lam


def route_operating(
    quality: F64,
    cost: F64,
    objective: Objective,
    min_samples: int,
    reference: Operating | None = None,
) -> tuple[npt.NDArray[np.intp], Operating | None]:
    """Tiers for rows that are the whole recent traffic, as the gateway routes them: by
    the λ and segment of their pooled sketch, or, with fewer than ``min_samples`` rows,
    by those of the reference traffic (``reference``), else each row alone (None)."""
    if len(quality) < min_samples:
        if reference is not None:
            picked = choose(quality, cost, reference.lam, reference.allowed, objective.dominance)
            return picked, reference
        tiers = [alone(list(q), list(c), objective) for q, c in zip(quality, cost, strict=True)]
        return np.asarray(tiers, dtype=np.intp), None
    where = traffic_operating(quality, cost, objective)
    return choose(quality, cost, where.lam, where.allowed, objective.dominance), where


def alone(quality: Sequence[float], cost: Sequence[float], objective: Objective) -> int:
    """The tier meeting the objective for this one request: under ``cost`` the best quality
    costing at most the share of the largest tier, under ``quality`` the cheapest tier
    reaching the share of the largest tier's quality."""
    tiers = range(len(quality))
    if objective.kind == "cost":
        within = [t for t in tiers if cost[t] <= objective.share * cost[-1] + 1e-18]
        if not within:
            return min(tiers, key=lambda t: cost[t])
        return max(within, key=lambda t: (quality[t], -cost[t]))
    enough = [t for t in tiers if quality[t] >= objective.share * quality[-1] - 1e-12]
    return min(enough, key=lambda t: (cost[t], -quality[t]))


def decide_tier(
    tiers: Sequence[str],
    quality: Sequence[float],
    cost: Sequence[float],
    lam: float | None,
    objective: Objective,
    why: str,
    allowed: Sequence[int] | None = None,
) -> TierChoice:
    """The choice for one request; ``lam`` None: meet the objective on this request alone;
    ``allowed``: the tiers of the objective's hull segment (default: all)."""
    among: Sequence[int] = range(len(quality))
    if lam is None:
        t = alone(quality, cost, objective)
        reason = f"{objective.kind} {objective.share:g} met by this request alone ({why})"
    else:
        shares = _shares(cost)
        # a segment from another tier count (a reload mid-window) or none: every tier
        valid = sorted(i for i in allowed or () if 0 <= i < len(quality))
        among = valid if valid and len(valid) == len(allowed or ()) else among
        value = {i: quality[i] - lam * shares[i] for i in among}
        best = max(value.values())
        t = next(i for i, v in value.items() if v >= best - 1e-12)  # as ``choose``
        segment = "" if allowed is None else f" among {', '.join(tiers[i] for i in among)}"
        reason = f"max quality - λ·cost at λ {lam:.4g}{segment} ({why})"
        low = min(among)
        if objective.dominance and allowed and t == low:
            full = [q - lam * c for q, c in zip(quality, shares, strict=True)]
            below = below_segment(quality, cost, full, low)
            if below != low:
                t = below
                reason += (
                    f"; below the segment: P({tiers[below]}) {quality[below]:.3f} >= "
                    f"P({tiers[low]}) {quality[low]:.3f} at a lower cost"
                )
    return TierChoice(
        tuple(tiers),
        tuple(round(float(q), 4) for q in quality),
        tuple(float(c) for c in cost),
        lam,
        tiers[t],
        reason,
        tuple(tiers[i] for i in among),
    )
