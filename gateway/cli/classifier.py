"""``tiergate classify``, ``train-classifier`` and ``eval-classifier``: batch tools, no server.

Heavy imports (onnxruntime, sklearn) happen inside the commands.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from gateway.routing.traffic_policy import traffic_tiers
from gateway.settings import load_effective_config
from policies.loader import ConfigError
from policies.schema import ClassifierConfig, GatewayConfig

BATCH = 512  # conversations scored at once; the embedder splits them further


class Progress:
    """``classified N/M (R/s)`` on stderr, at most every ``every_s`` seconds."""

    def __init__(self, total: int, every_s: float = 5.0) -> None:
        self.total, self.every_s = total, every_s
        self.started = self.shown = time.monotonic()
        self.count = 0

    def done(self, count: int) -> None:
        self.count = count
        if time.monotonic() - self.shown >= self.every_s:
            self._show()

    def finish(self) -> None:
        if self.total:
            self._show()

    def _show(self) -> None:
        self.shown = time.monotonic()
        rate = self.count / max(self.shown - self.started, 1e-9)
        print(f"classified {self.count}/{self.total} ({rate:.0f}/s)", file=sys.stderr, flush=True)


def _config(path: Path | None) -> GatewayConfig:
    return load_effective_config(path)


def _spec(config: GatewayConfig, model: Path | None) -> ClassifierConfig:
    spec = config.routing.classifier or ClassifierConfig()
    return spec.model_copy(update={"model": str(model)}) if model is not None else spec


Record = tuple[Any, list[Mapping[str, Any]], Mapping[str, Any]]  # id, messages, the row


def _records(stream: IO[bytes], errors: list[str]) -> Iterator[Record]:
    from routers.features import prompt_messages

    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            errors.append(f"line {number}: invalid JSON: {exc}")
            continue
        if not isinstance(record, dict) or "id" not in record:
            errors.append(f"line {number}: needs an object with 'id'")
            continue
        messages = record.get("messages")
        if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
            yield record["id"], messages, record
        elif isinstance(record.get("prompt"), str):
            yield record["id"], list(prompt_messages(record["prompt"])), record
        else:
            errors.append(f"line {number}: needs 'prompt' (string) or 'messages' (list)")


def cmd_classify(args: argparse.Namespace) -> int:
    from routers.setup import build_routing

    try:
        config = _config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    objective = config.routing.objective
    stands_for = objective.reference if objective is not None else None
    built = build_routing(_spec(config, args.model), tuple(config.tiers), stands_for)
    errors: list[str] = []
    source = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    try:
        records = list(_records(source, errors))
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    conversations = [m for _, m, _ in records]
    progress = Progress(len(records))
    scores = _scores(built, conversations, progress)
    progress.finish()
    traffic = built.quality.reference_traffic() if built.quality is not None else None
    if config.routing.sessions is not None and config.routing.objective is not None:
        routed = _session_lines(config, built, records, scores, traffic)
    else:
        routed = traffic_tiers(config, conversations, scores, traffic)
    target = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")
    try:
        for (ident, _, _), score, line in zip(records, scores, routed, strict=True):
            quality = dict(zip(config.tiers, score.quality or (), strict=False))
            out = {"id": ident, "score": round(score.score, 6), **line}
            out["quality"] = {t: round(q, 4) for t, q in quality.items()}
            target.write(orjson.dumps(out) + b"\n")
        target.flush()
    finally:
        if target is not sys.stdout.buffer:
            target.close()
    for error in errors:
        print(error, file=sys.stderr)
    return 1 if errors else 0


def _scores(
    built: Any, conversations: list[list[Mapping[str, Any]]], progress: Progress | None = None
) -> list[Any]:
    from routers.training.batch import score_conversations

    scores = []
    for start in range(0, len(conversations), BATCH):
        batch = conversations[start : start + BATCH]
        scores += score_conversations(built.classifier, built.embedder, batch)
        if progress is not None:
            progress.done(len(scores))
    return scores


def _session_lines(
    config: GatewayConfig, built: Any, records: list[Record], scores: list[Any], traffic: Any
) -> list[dict[str, Any]]:
    """Rows as agent turns: a row's ``session`` (else its conversation's stable prefix)
    groups it with the earlier rows of its session, ``signal`` names a failure after it
    (its session's next turn escalates); tasks and new instructions are predicted on
    what the gateway predicts them on (``gateway/routing/traffic_sessions.py``)."""
    from gateway.routing.traffic_sessions import session_tiers
    from routers.session import SessionHint
    from routers.session_replay import plan_turns

    hints = [
        SessionHint("header", str(row["session"])) if row.get("session") else None
        for _, _, row in records
    ]
    planned = plan_turns([m for _, m, _ in records], hints)
    extra = [
        i
        for i, p in enumerate(planned)
        if p.predict is not None and len(p.predict) != len(records[i][1])
    ]
    more = _scores(built, [list(planned[i].predict or ()) for i in extra])
    fresh: list[Any] = [
        s.quality if p.predict is not None else None for p, s in zip(planned, scores, strict=True)
    ]
    for i, score in zip(extra, more, strict=True):
        fresh[i] = score.quality
    signals = [row.get("signal") or None for _, _, row in records]
    return session_tiers(config, planned, fresh, traffic, signals)


def cmd_train(args: argparse.Namespace) -> int:
    from routers.embedders import build_embedder
    from routers.training import datasets
    from routers.training.batch import cached_embed, embed_texts, embedding_cache_path
    from routers.training.complexity_fit import TrainOptions, fit

    if args.from_traffic:
        from gateway.cli.feedback import train_from_traffic

        return train_from_traffic(args)
    spec = _spec(_config(args.config), None)
    try:
        examples = datasets.load_operator(args.data) if args.data else []
    except datasets.DataError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.data is None or args.with_shared:
        examples += datasets.shared_splits().train
    if args.limit:
        examples = examples[: args.limit]
    embedder = build_embedder(spec)
    started = time.perf_counter()
    texts = [e.text for e in examples]

    def progress(done: int) -> None:
        _progress("embedded", done, len(texts))

    if args.no_cache:
        vectors = embed_texts(embedder, texts, progress)
    else:
        vectors = cached_embed(embedder, texts, embedding_cache_path(embedder.name), progress)
    print(f"\nembedded {len(texts)} texts in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    info = {"data": str(args.data) if args.data else "data/routing (train split)"}
    if args.quality:
        return _train_quality(args, examples, vectors, embedder.name, info)
    options = TrainOptions(
        seed=args.seed,
        c=args.c,
        length_prior=args.length_prior,
        calibration_folds=args.calibration_folds,
    )
    model = fit(examples, vectors, embedder.name, options, info)
    args.out = args.out or Path("complexity.npz")
    model.save(args.out)
    print(f"wrote {args.out}: heads {', '.join(model.heads)}, {len(examples)} examples")
    return 0


def _train_quality(
    args: argparse.Namespace, examples: Any, vectors: Any, embedder: str, info: dict[str, str]
) -> int:
    """The per-tier quality model (``routers/training/quality_fit.py``) instead of the score."""
    from routers.training.quality_fit import LADDER, QualityOptions, fit_quality

    ladder = tuple(args.ladder.split(",")) if args.ladder else LADDER
    options = QualityOptions(
        ladder=ladder, calibration_folds=args.calibration_folds, regions=args.regions
    )
    out = args.out if args.out != Path("complexity.npz") else Path("quality.npz")
    try:
        model = fit_quality(examples, vectors, embedder, options, info)
    except ValueError as exc:
        print(f"cannot fit the quality model: {exc}", file=sys.stderr)
        return 2
    model.save(out)
    print(f"wrote {out}: {len(model.models)} model heads, ladder {' < '.join(model.ladder)}")
    return 0


def _progress(what: str, done: int, total: int) -> None:
    print(f"\r{what} {done}/{total}", end="", file=sys.stderr, flush=True)


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

    config = _config(args.config)
    built = build_routing(_spec(config, args.model))
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

    from gateway.routing.objective import objective_of
    from routers.objective import Objective
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
    classify = sub.add_parser("classify", help="score prompts: JSONL in, JSONL out")
    classify.add_argument(
        "input",
        nargs="?",
        default="-",
        help='JSONL of {"id","prompt"|"messages"} (optional "session", "signal": agent turns)',
    )
    classify.add_argument(
        "-o", "--output", default="-", help='JSONL of {"id","score","tier","quality",...}'
    )
    classify.add_argument("--config", type=Path, default=None, help="thresholds and tiers from")
    classify.add_argument("--model", type=Path, default=None, help="a trained .npz")
    classify.set_defaults(func=cmd_classify)

    train = sub.add_parser("train-classifier", help="train the complexity classifier")
    train.add_argument("--data", type=Path, default=None, help="your labelled CSV/JSONL")
    train.add_argument("--with-shared", action="store_true", help="add the shipped data")
    train.add_argument(
        "--out", type=Path, default=None, help="complexity.npz (--from-traffic: refit.npz)"
    )
    train.add_argument(
        "--from-traffic",
        action="store_true",
        help="refit from the labels routing.feedback gathered in the shared store",
    )
    train.add_argument(
        "--publish", action="store_true", help="--from-traffic: serve an accepted refit"
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--c", type=float, default=0.05, help="inverse L2 strength")
    train.add_argument("--length-prior", type=float, default=1.0)
    train.add_argument(
        "--calibration-folds",
        type=int,
        default=5,
        help="benchmark-held-out folds for stacking and calibration (0: uncalibrated)",
    )
    train.add_argument("--limit", type=int, default=0, help="first N examples only")
    train.add_argument(
        "--quality",
        action="store_true",
        help="fit the per-tier quality model (routing.objective) from every row with per-model "
        "correctness ('scores' in --data rows); default out: quality.npz",
    )
    train.add_argument(
        "--ladder", default="", help="with --quality: the reference models, cheapest first"
    )
    train.add_argument(
        "--regions",
        type=int,
        default=0,
        help="with --quality: the regional signal check over this many embedding regions",
    )
    train.add_argument(
        "--no-cache",
        action="store_true",
        help="do not keep embeddings in $TIERGATE_CACHE_DIR/embeddings (default ~/.cache/tiergate)",
    )
    train.add_argument("--config", type=Path, default=None, help="embedder settings from")
    train.set_defaults(func=cmd_train)

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
