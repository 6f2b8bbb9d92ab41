"""``tiergate classify`` and ``train-classifier``: batch tools, no server
(``eval-classifier``: ``gateway.cli.evaluate``).

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

from gateway.settings import load_effective_config
from policies.loader import ConfigError
from policies.routing_spec import ClassifierConfig
from policies.schema import GatewayConfig
from routers.traffic_policy import traffic_tiers

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


def config_from(path: Path | None) -> GatewayConfig:
    return load_effective_config(path)


def spec_of(config: GatewayConfig, model: Path | None) -> ClassifierConfig:
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
        config = config_from(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    objective = config.routing.objective
    stands_for = objective.reference if objective is not None else None
    built = build_routing(spec_of(config, args.model), tuple(config.tiers), stands_for)
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
    what the gateway predicts them on (``routers/traffic_sessions.py``)."""
    from routers.session import SessionHint
    from routers.session_replay import plan_turns
    from routers.traffic_sessions import session_tiers

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
    spec = spec_of(config_from(args.config), None)
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
