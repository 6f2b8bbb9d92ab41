"""The objective's segment of the traffic's fixed-tier hull: the tiers requests may go to.

Random mixes of fixed tiers reach the upper concave hull of their (cost, quality)
points, and nothing below it. A policy that mixes two tiers which are *not* neighbours on
that hull — some requests to the small tier, some to the large one, at a cost the medium
tier would serve better — beats the hull only if its predictions tell, request by
request, which ones the medium tier would fail and the small one answer: a sharp ranking.
The quality model is calibrated out of family and is honest, not sharp (docs/
classifier.md), and where its levels are off (a tier it never saw on such traffic) a
skipped neighbour is exactly where the loss comes from.

So the policy first places the objective on the hull of the traffic's *predicted*
fixed-tier points — per tier the pooled expected quality and cost share — and finds the
segment it falls on: two neighbouring vertices (or one, when the objective sits at or
beyond a vertex). Every request then chooses between those tiers only, by the same
quality - λ · cost rule, with λ learnt from the same traffic restricted to them. With no
signal every request sees the same trade-off and all go to one vertex; with some signal
the policy moves along that segment by its ranking, never across a vertex. No parameter,
nothing fitted: it follows from the hull's concavity and the traffic's own predictions.

The sketch carries, besides the full breakpoints, per-tier totals (``t<i>q``, ``t<i>c``)
and, for every pair of tiers of three or more, the pair's breakpoints under the prefix
``p<a>.<b>:``; all fields stay integers, so replicas still pool them with ``HINCRBY``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import pairwise

from routers.lambda_sketch import cost_count, lambda_for, quality_count


def pair_prefix(pair: Sequence[int]) -> str:
    """The sketch fields of the pair of tiers ``pair`` (cheaper first) start with this."""
    return f"p{pair[0]}.{pair[1]}:"


def tier_totals(counts: Counter[str], quality: Sequence[float], shares: Sequence[float]) -> None:
    """Add one request's per-tier expected quality and cost share to a sketch."""
    for t, (q, c) in enumerate(zip(quality, shares, strict=True)):
        counts[f"t{t}q"] += quality_count(q)
        counts[f"t{t}c"] += cost_count(c)


def tiers_in(fields: Mapping[str, int]) -> int:
    """How many tiers a sketch's per-tier totals cover."""
    seen = [int(k[1:-1]) for k in fields if k[:1] == "t" and k[-1:] == "q" and k[1:-1].isdigit()]
    return max(seen, default=-1) + 1


def hull_vertices(cost: Sequence[float], quality: Sequence[float]) -> list[int]:
    """Tiers on the upper concave hull of their (cost, quality) points, cheapest first
    (a tier no better than a cheaper one, or below the chord of its neighbours, drops)."""
    order = sorted(range(len(cost)), key=lambda t: (cost[t], -quality[t]))
    hull: list[int] = []
    for t in order:
        if hull and quality[t] <= quality[hull[-1]]:
            continue
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b is below (or on) the chord from a to t: not a vertex
            cross = (cost[b] - cost[a]) * (quality[t] - quality[a]) - (quality[b] - quality[a]) * (
                cost[t] - cost[a]
            )
            if cross >= 0:
                hull.pop()
            else:
                break
        hull.append(t)
    return hull


def segment(fields: Mapping[str, int], tiers: int, kind: str, share: float) -> tuple[int, ...]:
    """The tiers of the predicted hull's segment the objective falls on (all tiers when
    the sketch has no per-tier totals)."""
    quality = [fields.get(f"t{t}q", 0) for t in range(tiers)]
    cost = [fields.get(f"t{t}c", 0) for t in range(tiers)]
    if tiers < 3 or not any(cost):
        return tuple(range(tiers))
    vertices = hull_vertices(cost, quality)
    axis = cost if kind == "cost" else quality
    target = share * fields.get("CL" if kind == "cost" else "QL", 0)
    if target <= axis[vertices[0]]:
        return (vertices[0],)
    for a, b in pairwise(vertices):
        if target <= axis[b]:
            return (a, b)
    return (vertices[-1],)


def segment_lambda(
    fields: Mapping[str, int], tiers: int, kind: str, share: float
) -> tuple[float, tuple[int, ...]]:
    """λ and the tiers requests may go to, for ``{kind: share}`` on the sketched traffic."""
    allowed = segment(fields, tiers, kind, share)
    if len(allowed) == tiers:
        return lambda_for(fields, kind, share), allowed
    if len(allowed) == 1:
        return 0.0, allowed
    prefix = pair_prefix(allowed)
    sub = {k[len(prefix) :]: v for k, v in fields.items() if k.startswith(prefix)}
    sub["CL"], sub["QL"] = fields.get("CL", 0), fields.get("QL", 0)
    return lambda_for(sub, kind, share), allowed
