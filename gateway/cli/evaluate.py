"""``tiergate eval-classifier``: the classifier against the length and random routers,
and the objective policy against the fixed-tier hull, on the held-out sets (or the
operator's labelled file). A batch tool, no server; heavy imports inside the command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gateway.cli.classifier import config_from, spec_of
from policies.routing_spec import ClassifierConfig
from policies.schema import GatewayConfig


def cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from routers.setup import build_routing
    from routers.training import datasets
    from routers.training.batch import (
        embedding_cache_path,
        evaluate,
        evaluate_three_tier,
        evaluation_sets,
        format_calibration,
        format_table,
        format_three_tier,
        score_conversations,
        three_tier_set,
    )
    from routers.training.evaluation import calibration

    config = config_from(args.config)
    built = build_routing(spec_of(config, args.model))
    thresholds = (config.routing.thresholds[0], config.routing.thresholds[-1])
    three: list[datasets.Example] = []
    scored: list[datasets.Example] = []
    if args.data is not None:
        try:
            operator = datasets.load_operator(args.data)
        except datasets.DataError as exc:
            print(exc, file=sys.stderr)
            return 2
        rows = [e for e in operator if e.weak is not None and e.strong is not None]
        sets = {args.data.name: rows} if rows else {}
        scored = [e for e in operator if e.scores]
    else:
        splits = datasets.shared_splits()
        sets = evaluation_sets(splits)
        three = three_tier_set(splits)

    cache = None if args.no_cache else embedding_cache_path(built.embedder.name)

    def score(examples: list[datasets.Example]) -> list[float]:
        conversations = [e.messages for e in examples]
        scored = score_conversations(built.classifier, built.embedder, conversations, cache)
        return [s.score for s in scored]

    if args.data is None:
        objective_report(config, built.embedder, cache, splits, args.plot)
        print()
    elif scored:  # per-model correctness: the objective on the operator's rows (sessions too)
        from routers.training.tier_sets import tier_set

        objective_report(
            config, built.embedder, cache, None, None, [tier_set(args.data.name, scored)]
        )
        print()
    scores = {name: score(list(examples)) for name, examples in sets.items()}
    if sets:
        print(format_table(evaluate(sets, scores, seed=args.seed)))
    if three:
        target = config.routing.target_share or {}
        shares = [target[t] for t in config.tiers] if len(target) == 3 else []
        row = evaluate_three_tier(
            "RouterBench mbpp + winogrande",
            three,
            score(three),
            thresholds,
            args.seed,
            shares=shares,
        )
        print()
        print(format_three_tier(row, thresholds))
    every = [e for examples in sets.values() for e in examples]
    if every:
        weak = np.array([e.weak for e in every], dtype=np.float64)
        pooled = np.concatenate([np.asarray(scores[n], dtype=np.float64) for n in sets])
        print()
        print(
            format_calibration(
                "all held-out rows, P(cheapest tier failed)", calibration(pooled, 1 - weak)
            )
        )
    return 0


def objective_report(
    config: GatewayConfig,
    embedder: Any,
    cache: Path | None,
    splits: Any,
    plot: Path | None,
    sets: Any = None,
) -> None:
    """The objective policy per held-out set (``sets``: these instead) against the
    fixed-tier hull, and the per-tier reliability; ``plot``: a cost-accuracy chart per set
    into that folder. Rows sharing a session (an operator row's ``session``, else a
    conversation's stable prefix) are routed as its turns, in order, as the gateway does."""
    import numpy as np

    from routers.objective import Objective, objective_of
    from routers.setup import quality_model
    from routers.training.batch import cached_embed, embed_texts, format_calibration
    from routers.training.complexity_fit import feature_matrix
    from routers.training.heldout import evaluate_sets, format_sets, held_out_sets, tier_calibration
    from routers.training.tier_sets import TierSet

    spec = config.routing.classifier or ClassifierConfig()
    model = quality_model(spec)
    configured = config.routing.objective
    objective = objective_of(configured) if configured is not None else Objective("cost", 0.25)
    min_samples = config.routing.target.min_samples

    def predict(rows: TierSet) -> Any:
        texts = [e.text for e in rows.examples]
        vectors = (
            embed_texts(embedder, texts) if cache is None else cached_embed(embedder, texts, cache)
        )
        view = model.for_tiers(rows.models, {m: m for m in rows.models})
        return view.predict(vectors, feature_matrix(rows.examples)).astype(np.float64)

    def reference(rows: TierSet) -> Any:
        return model.for_tiers(rows.models, {m: m for m in rows.models}).reference_traffic()

    sets = held_out_sets(splits) if sets is None else sets
    evaluated = evaluate_sets(sets, predict, objective, min_samples, reference)
    print(format_sets(evaluated, objective))
    for name, cal in tier_calibration(sets, predict):
        print()
        print(format_calibration(f"P(acceptable), {name} tier of each held-out set", cal))
    if plot is not None:
        from routers.training.plots import draw, sweep

        for row in evaluated:
            curve = sweep(
                predict(row.rows), row.rows, min_samples, reference(row.rows), objective.segment
            )
            print(f"wrote {draw(row, curve, plot, objective)}")


def add_commands(sub: Any) -> None:
    judge = sub.add_parser("eval-classifier", help="APGR/CPT vs length and random routers")
    judge.add_argument("--model", type=Path, default=None, help="a trained .npz")
    judge.add_argument(
        "--data", type=Path, default=None, help="labelled file with small_correct/large_correct"
    )
    judge.add_argument("--seed", type=int, default=0)
    judge.add_argument("--no-cache", action="store_true", help="embed afresh, keep nothing")
    judge.add_argument("--config", type=Path, default=None)
    judge.add_argument(
        "--plot", type=Path, default=None, help="write a cost-accuracy PNG per held-out set here"
    )
    judge.set_defaults(func=cmd_eval)
