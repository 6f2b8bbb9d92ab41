"""A mergeable sketch of recent traffic's cost/quality trade-offs, and λ from it.

Under ``routing.objective`` a request goes to the tier maximising expected quality -
λ · expected cost. As λ grows, each request steps down to cheaper tiers at a few
breakpoints (λ values where two tiers tie); at each step its cost falls by some dollars
and its expected quality by some amount (costs as shares of what the request's largest
tier would charge). The sketch adds those drops into ``BINS`` bins on a log-λ axis,
plus totals: cost and quality at λ = 0 and of always the largest tier, and the number of
requests. Replicas merge sketches by adding fields (integers: billionths of a cost share
and millionths of quality, so Redis ``HINCRBY`` pools them), and λ for an objective is
read by walking the bins:

* ``cost: s``: the smallest λ at which the traffic spends at most ``s`` x always-largest;
* ``quality: s``: the largest λ at which expected quality stays ≥ ``s`` x always-largest.

A bin is 0.44 % of λ wide (4,096 bins over 18 decades): a request whose breakpoint lies
in the bin λ is read at has switched (cost) or not (quality), so the objective holds on
the sketched traffic itself, not only up to a bin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

BINS = 4096
LOG10_MIN = -6.0  # λ in quality per share of the largest tier's cost
LOG10_MAX = 12.0
_WIDTH = (LOG10_MAX - LOG10_MIN) / BINS
COST_UNIT = 1e-9  # share of a request's largest-tier cost per count
QUALITY_UNIT = 1e-6
TOTALS = ("C0", "Q0", "CL", "QL", "n")


def bin_of(lam: float) -> int:
    if lam <= 0:
        return 0
    return min(max(int((math.log10(lam) - LOG10_MIN) / _WIDTH), 0), BINS - 1)


def lower_edge(b: int) -> float:
    return float(10 ** (LOG10_MIN + b * _WIDTH))


def upper_edge(b: int) -> float:
    return float(10 ** (LOG10_MIN + (b + 1) * _WIDTH))


def cost_count(share: float) -> int:
    return round(share / COST_UNIT)


def quality_count(quality: float) -> int:
    return round(quality / QUALITY_UNIT)


def _drops(fields: Mapping[str, int], prefix: str) -> dict[int, int]:
    return {int(k[1:]): n for k, n in fields.items() if k[0] == prefix and k[1:].isdigit()}


def lambda_for(fields: Mapping[str, int], kind: str, share: float) -> float:
    """λ meeting ``{kind: share}`` on the sketched traffic (``kind``: cost or quality)."""
    if kind == "cost":
        target = share * fields.get("CL", 0)
        spend = fields.get("C0", 0)
        if spend <= target:
            return 0.0
        drops = _drops(fields, "c")
        for b in sorted(drops):
            spend -= drops[b]
            if spend <= target:
                return upper_edge(b)
        return upper_edge(BINS - 1)
    target = share * fields.get("QL", 0)
    quality = fields.get("Q0", 0)
    if quality < target:
        return 0.0
    drops = _drops(fields, "q")
    for b in sorted(drops):
        if quality - drops[b] < target:
            return lower_edge(b) * (1 - 1e-9)
        quality -= drops[b]
    return upper_edge(BINS - 1)
