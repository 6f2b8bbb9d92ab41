"""Labelled prompts for training and judging the classifier.

Three sources, one row type:

* the vendored pool (``data/routing/pool.csv.gz``): per-tier correctness → ``label`` =
  the cheapest tier's model failed (better on validation than "failed and a bigger one
  answered", which calls the hardest requests easy); GSM8K-train rows
  carry no correctness, only ``steps`` (``<<…>>`` calculations in the reference solution),
  turned into a weak label (``steps ≥ 4``) with a smaller weight;
* the golden sample (``data/routing/golden.csv.gz``): weak/strong correctness on MMLU and
  GSM8K; half of it (fixed by a hash of ``item_id``) is held out for evaluation;
* an operator's own file (CSV or JSONL, schema in ``docs/classifier.md``).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routers.embedding import last_user_text
from routers.features import prompt_messages

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "routing"
POOL = DATA_DIR / "pool.csv.gz"
GOLDEN = DATA_DIR / "golden.csv.gz"
ANCHORS = DATA_DIR / "anchors.csv"
ANCHOR_WEIGHT = 5.0
# Whole benchmarks never trained on: traffic unlike the training set.
HELD_OUT_BENCHMARKS = frozenset({"winogrande", "openbook_qa", "mbpp"})
GSM8K_HARD_STEPS = 4
GSM8K_WEIGHT = 0.3


class DataError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Example:
    messages: tuple[Mapping[str, Any], ...]
    label: float | None  # P(needs more than the smallest tier), None: unlabelled
    weight: float
    benchmark: str
    source: str
    weak: float | None = None  # correctness of the smallest tier's model (for evaluation)
    strong: float | None = None  # correctness of the strongest tier's model
    large: float | None = None  # needs the large tier (three-tier sources only)
    difficulty: float | None = None  # share of all the pool's models that failed it
    tiers: tuple[float, float, float] | None = None  # correctness per tier (three-tier rows)
    costs: tuple[float, float, float] | None = None  # USD per tier (three-tier rows)
    # Every scored model's correctness by model name (the quality model's item-response fit)
    scores: Mapping[str, float] | None = None
    session: str | None = None  # an operator row's session: rows sharing it are its turns

    @property
    def text(self) -> str:
        return last_user_text(self.messages)


def _rows(path: Path) -> Iterator[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as handle:
        yield from csv.DictReader(handle)


def _float(value: str | None) -> float | None:
    return None if value is None or value == "" else float(value)


def family(benchmark: str) -> str:
    """The benchmark a row belongs to across sources (``arc_challenge`` = ``arc-challenge``)."""
    return benchmark.lower().replace("_", "-")


def _scores(value: str | None) -> dict[str, float] | None:
    if not value:
        return None
    parsed = json.loads(value)
    return {str(name): float(score) for name, score in parsed.items()}


# The golden sample's weak and strong models, by the names the pool's ``scores`` use.
GOLDEN_WEAK = "mixtral-8x7b-instruct"
GOLDEN_STRONG = "gpt-4-1106-preview"


def golden_held_out(item_id: str) -> bool:
    return hashlib.sha256(item_id.encode()).digest()[0] % 2 == 0


def load_pool(path: Path = POOL) -> list[Example]:
    examples = []
    for row in _rows(path):
        tier_min = _float(row["tier_min"])
        messages = tuple(prompt_messages(row["prompt"]))
        if tier_min is None:
            steps = int(row["steps"] or 0)
            label, weight = float(steps >= GSM8K_HARD_STEPS), GSM8K_WEIGHT
            weak = strong = large = None
            tiers = costs = None
        else:
            weak, strong = _float(row["cheap"]), _float(row["expensive"])
            label, weight = float((weak or 0.0) < 1), 1.0
            large = float(tier_min == 2) if row["medium"] else None
            tiers = costs = None
            if row["medium"] and row["cost_expensive"]:
                tiers = (weak or 0.0, float(row["medium"]), strong or 0.0)
                costs = (
                    float(row["cost_cheap"]),
                    float(row["cost_medium"]),
                    float(row["cost_expensive"]),
                )
        examples.append(
            Example(
                messages,
                label,
                weight,
                row["benchmark"],
                row["source"],
                weak,
                strong,
                large,
                _float(row.get("fail_rate")),
                tiers,
                costs,
                _scores(row.get("scores")),
            )
        )
    return examples


def load_golden(path: Path = GOLDEN) -> list[tuple[Example, bool]]:
    """Each example with whether it belongs to the held-out half."""
    out = []
    for row in _rows(path):
        weak, strong = float(row["weak_correct"]), float(row["strong_correct"])
        example = Example(
            tuple(prompt_messages(row["prompt"])),
            float(weak < 1 and strong > 0),
            1.0,
            row["benchmark"],
            "golden",
            weak,
            strong,
            scores={GOLDEN_WEAK: weak, GOLDEN_STRONG: strong},
        )
        out.append((example, golden_held_out(row["item_id"])))
    return out


def load_anchors(path: Path = ANCHORS, weight: float = ANCHOR_WEIGHT) -> list[Example]:
    """Hand-labelled anchors for what the benchmarks lack: chit-chat and one-line facts
    (label 0) and open-ended expert work (label 1). Judged, not measured: see the README."""
    return [
        Example(
            tuple(prompt_messages(r["prompt"])), float(r["label"]), weight, "anchors", "anchors"
        )
        for r in _rows(path)
    ]


def _operator_example(record: Mapping[str, Any], where: str) -> Example:
    if "messages" in record and record["messages"] not in (None, ""):
        messages = record["messages"]
        if isinstance(messages, str):
            messages = json.loads(messages)
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise DataError(f"{where}: messages must be a list of objects")
    elif isinstance(record.get("prompt"), str) and record["prompt"]:
        messages = prompt_messages(record["prompt"])
    else:
        raise DataError(f"{where}: needs 'prompt' or 'messages'")
    weak = _float(_text(record.get("small_correct")))
    strong = _float(_text(record.get("large_correct")))
    if _text(record.get("label")) not in (None, ""):
        label = float(record["label"])
    elif _text(record.get("tier_min")) not in (None, ""):
        label = float(int(float(record["tier_min"])) >= 1)
    elif weak is not None and strong is not None:
        label = float(weak < 1 and strong > 0)
    else:
        raise DataError(f"{where}: needs 'label', 'tier_min' or 'small_correct'+'large_correct'")
    if not 0.0 <= label <= 1.0:
        raise DataError(f"{where}: label must lie in [0, 1]")
    weight = float(record.get("weight") or 1.0)
    group = str(record.get("group") or "operator")
    scores = record.get("scores")
    if isinstance(scores, str) and scores:
        scores = json.loads(scores)
    if scores not in (None, "") and not (
        isinstance(scores, dict) and all(isinstance(v, int | float) for v in scores.values())
    ):
        raise DataError(f"{where}: scores must map model names to correctness")
    named = {str(k): float(v) for k, v in scores.items()} if isinstance(scores, dict) else None
    session = _text(record.get("session")) or None
    return Example(
        tuple(messages),
        label,
        weight,
        group,
        "operator",
        weak,
        strong,
        scores=named,
        session=session,
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def load_operator(path: Path) -> list[Example]:
    """An operator's labelled traffic: ``.jsonl`` (one object a line) or ``.csv``."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror}") from exc
    records: Sequence[Mapping[str, Any]]
    if path.suffix == ".jsonl":
        records = []
        for n, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{n}: invalid JSON: {exc.msg}") from exc
    elif path.suffix == ".csv":
        records = list(csv.DictReader(io.StringIO(raw)))
    else:
        raise DataError(f"{path}: use a .csv or .jsonl file")
    examples = [_operator_example(r, f"{path}:{i + 1}") for i, r in enumerate(records)]
    if len({e.label for e in examples}) < 2:
        raise DataError(f"{path}: needs both labels (0 and 1) among its rows")
    return examples


@dataclass(frozen=True, slots=True)
class Splits:
    train: list[Example]
    golden_test: list[Example]
    pool_test: list[Example]


def shared_splits(pool_path: Path = POOL, golden_path: Path = GOLDEN) -> Splits:
    pool = load_pool(pool_path)
    golden = load_golden(golden_path)
    train = [e for e in pool if e.benchmark not in HELD_OUT_BENCHMARKS]
    train += [e for e, held in golden if not held]
    train += load_anchors()
    return Splits(
        train=train,
        golden_test=[e for e, held in golden if held],
        pool_test=[e for e in pool if e.benchmark in HELD_OUT_BENCHMARKS],
    )
