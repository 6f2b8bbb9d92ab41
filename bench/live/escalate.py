"""Escalation replayed on the live records, and its threshold calibrated on the FIT set.

The gateway's own functions decide (``routers.escalation``): for each prompt, prompt-only
``auto``'s choice (``tiergate classify``: the tier, the per-tier qualities, λ and the tiers it
chose among; expected costs as the gateway computes them) becomes the ``TierDecision`` the
gateway would hold; ``plan_escalation`` says whether a cheaper tier answers first, and
``judge`` keeps or rejects that tier's *recorded* answer by its recorded token
log-probabilities. A kept answer costs the cheap attempt; a rejected one costs both
attempts and is graded as the next tier's answer.

Calibration (``python -m bench.live.escalate --set fit``): on the FIT records only, every
signal in ``SIGNALS``, margin in ``MARGINS`` and threshold between the cheap answers'
signals is replayed;
the operator's objective picks one, as ``routing.objective`` picks λ: ``{quality: q}``:
the cheapest setting whose accuracy reaches ``q`` times always-large's; ``{cost: c}``: the
most accurate whose cost stays within ``c`` times always-large's. Prints the YAML to set.
``--dir D``: the records and grades under ``D`` (default ``bench/live``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gateway.settings import load_effective_config
from policies.escalation_spec import EscalationSpec
from routers.decision import TierDecision
from routers.escalation import judge, plan_escalation, signal_of
from routers.objective import TierChoice
from routers.tier_costs import expected_costs

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TIERS = ("small", "medium", "large")
MARGINS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
# The signals tried: Gupta et al.'s low quantile, the least token, the mean.
SIGNALS = ({"signal": "quantile", "quantile": 0.1}, {"signal": "min"}, {"signal": "mean"})

Records = Mapping[str, Mapping[str, Mapping[str, Any]]]
Grades = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class Answered:
    """Where one prompt ended under a policy: the tier whose answer the client got, its
    grade, what every attempt cost, and whether it escalated (None: one attempt)."""

    tier: str
    correct: int
    usd: float
    cpu_s: float
    escalated: bool | None = None


def decisions(
    rows: Mapping[str, Mapping[str, Any]], prompts: Mapping[str, str], config: Path
) -> dict[str, TierDecision]:
    """``tiergate classify`` rows as the gateway's ``TierDecision`` per prompt."""
    gateway = load_effective_config(config)
    objective = gateway.routing.objective
    assert objective is not None, "the live bench replays routing.objective"
    out = {}
    for ident, row in rows.items():
        cost = tuple(expected_costs(gateway, objective, len(prompts[ident])))
        quality = tuple(row["quality"][t] for t in TIERS)
        choice = TierChoice(
            TIERS, quality, cost, row["lambda"], row["tier"], "", tuple(row["among"])
        )
        out[ident] = TierDecision(row["tier"], None, row["score"], (), movable=True, choice=choice)
    return out


def spec_of(config: Path, tenant: str = "demo") -> EscalationSpec:
    """The escalation a tenant gets under the config (its own block, else routing's)."""
    gateway = load_effective_config(config)
    spec = gateway.tenants[tenant].escalation or gateway.routing.escalation
    assert spec is not None and spec.on, f"no escalation for tenant {tenant!r}"
    return spec


def single(tier: str, record: Mapping[str, Any], correct: int) -> Answered:
    return Answered(tier, correct, record.get("cost_usd", 0.0), record.get("cpu_s", 0.0))


def escalated(
    decision: TierDecision,
    spec: EscalationSpec,
    records: Mapping[str, Any],
    grades: Mapping[str, int],
) -> Answered:
    """One prompt as the gateway serves it with ``spec``: the plan, then the judge."""
    plan, _ = plan_escalation(spec, decision, TIERS, TIERS)
    if plan is None:
        return single(decision.tier, records[decision.tier], grades[decision.tier])
    cheap = records[plan.cheap]
    verdict = judge([e["logprob"] for e in cheap.get("logprobs", ())], spec)
    if verdict.kept:
        return replace(single(plan.cheap, cheap, grades[plan.cheap]), escalated=False)
    then = records[plan.then]
    return Answered(
        plan.then,
        grades[plan.then],
        cheap.get("cost_usd", 0.0) + then.get("cost_usd", 0.0),
        cheap.get("cpu_s", 0.0) + then.get("cpu_s", 0.0),
        escalated=True,
    )


def replay(
    ids: list[str],
    plans: Mapping[str, TierDecision],
    spec: EscalationSpec,
    records: Records,
    grades: Grades,
) -> list[Answered]:
    return [escalated(plans[i], spec, records[i], grades[i]) for i in ids]


def totals(answers: list[Answered]) -> tuple[float, float]:
    """(accuracy, priced USD) of a policy's answers."""
    return sum(a.correct for a in answers) / len(answers), sum(a.usd for a in answers)


def candidate_thresholds(
    ids: list[str],
    plans: Mapping[str, TierDecision],
    spec: EscalationSpec,
    records: Records,
    most: int = 80,
) -> list[float]:
    """Points where the verdict on some cheap answer changes (each cheap tier's signal on
    each prompt; at most ``most``, evenly spaced among them), one below them all and 0."""
    signals = set()
    for i in ids:
        for tier in TIERS[:-1]:
            value = signal_of([e["logprob"] for e in records[i][tier].get("logprobs", ())], spec)
            if value is not None:
                signals.add(round(value, 4))
    ordered = sorted(signals)
    step = max(1, len(ordered) // most)
    return sorted({min(signals, default=0.0) - 0.01, *ordered[::step], 0.0})


def calibrate(
    ids: list[str],
    plans: Mapping[str, TierDecision],
    base: EscalationSpec,
    records: Records,
    grades: Grades,
    objective: Mapping[str, float],
    margins: tuple[float, ...] = MARGINS,
) -> tuple[EscalationSpec, float, float, int]:
    """The (signal, margin, threshold) the objective picks on these records, its accuracy
    and cost, and how many settings were tried."""
    large = totals([single("large", records[i]["large"], grades[i]["large"]) for i in ids])
    tried = []
    for signal in SIGNALS:
        reduced = base.model_copy(update=signal)
        for threshold in candidate_thresholds(ids, plans, reduced, records):
            for margin in margins:
                spec = reduced.model_copy(update={"margin": margin, "threshold": threshold})
                accuracy, usd = totals(replay(ids, plans, spec, records, grades))
                tried.append((spec, accuracy, usd))
    if "quality" in objective:
        floor = objective["quality"] * large[0]
        met = [t for t in tried if t[1] >= floor - 1e-12] or [max(tried, key=lambda t: t[1])]
        best = min(met, key=lambda t: (t[2], -t[1], t[0].margin))
    else:
        ceiling = objective["cost"] * large[1]
        fits = [t for t in tried if t[2] <= ceiling + 1e-12] or [min(tried, key=lambda t: t[2])]
        best = max(fits, key=lambda t: (t[1], -t[2], -t[0].margin))
    return best[0], best[1], best[2], len(tried)


def main() -> None:
    from bench.live.analyse import auto_rows, records
    from bench.live.sets import load

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", default="fit", choices=["fit"], help="calibrate on FIT only")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "gateway.yaml")
    parser.add_argument("--objective", default="", help="e.g. quality=0.95 or cost=0.5")
    parser.add_argument("--dir", type=Path, default=HERE, help="records/ and grades/ under it")
    parser.add_argument(
        "--margin",
        type=float,
        default=None,
        help="keep this margin (how often the cheap tier "
        "answers first); calibrate the signal and threshold only",
    )
    args = parser.parse_args()
    gateway = load_effective_config(args.config)
    if args.objective:
        key, value = args.objective.split("=")
        objective = {key: float(value)}
    else:
        configured = gateway.routing.objective
        assert configured is not None
        objective = {configured.kind: float(configured.cost or configured.quality or 0)}
    items = {item["id"]: item for item in load(args.set)}
    recs = records(args.dir / "records", args.set)
    grades = json.loads((args.dir / "grades" / f"{args.set}.json").read_text())
    ids = [i for i in items if set(TIERS) <= set(recs.get(i, {})) & set(grades.get(i, {}))]
    rows = auto_rows([items[i] for i in ids], args.config)
    plans = decisions(rows, {i: items[i]["prompt"] for i in ids}, args.config)
    spec, accuracy, usd, tried = calibrate(
        ids,
        plans,
        spec_of(args.config),
        recs,
        grades,
        objective,
        MARGINS if args.margin is None else (args.margin,),
    )
    large = totals([single("large", recs[i]["large"], grades[i]["large"]) for i in ids])
    print(
        f"# {len(ids)} FIT prompts, objective {objective}, {tried} settings tried: "
        f"accuracy {accuracy:.3f}, {usd:.5f} USD; always-large {large[0]:.3f}, {large[1]:.5f} USD"
    )
    print(
        f"escalation: {{margin: {spec.margin:g}, signal: {spec.signal}, "
        f"quantile: {spec.quantile:g}, threshold: {spec.threshold:g}}}"
    )


if __name__ == "__main__":
    main()
