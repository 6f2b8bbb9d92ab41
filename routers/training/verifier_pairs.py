"""The learned verifier's pairs: what it is trained on, calibrated on, and evaluated on.

Three disjoint parts (data/README.md, "Verifier pairs"):

- ``train``: the public corpora vendored in ``data/verifier/train_pairs.jsonl`` (MSRP,
  SICK, STS 2012-2015; split ``train``) plus the project's ``tune`` pairs (and the extra
  near-misses filled into tune frames, ``tune_extra.jsonl``) whose template (or,
  hand-written, whose id) hashes into the training share;
- ``calib``: the rest of both (split ``calib`` and the other tune templates): the
  tenant's ``max_wrong_rate`` becomes a threshold here, nowhere else;
- ``heldout``: the project's held-out pairs, ``wordorder``: the held-out word-order
  pairs (``routers/training/corpora/verifier_wordorder.py``: their ``tune`` pairs join ``train`` and
  ``calib`` like the other tune pairs), and ``external``: the evaluation-only sets
  (PAWS-QQP dev/test, curai medical pairs, SemEval-2016 STS question-question),
  ``data/verifier/eval_external.jsonl``. None is ever trained or tuned on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import orjson

from routers.training.semantic_eval import DATA, load_pairs

VERIFIER_DATA = DATA / "verifier"
TRAIN_PAIRS = VERIFIER_DATA / "train_pairs.jsonl"
EXTERNAL = VERIFIER_DATA / "eval_external.jsonl"
TUNE_EXTRA = VERIFIER_DATA / "tune_extra.jsonl"  # routers/training/corpora/verifier_augment.py
WORD_ORDER = (
    VERIFIER_DATA / "wordorder_pairs.jsonl"
)  # routers/training/corpora/verifier_wordorder.py
TUNE_CALIB_SHARE = 0.3
Part = Literal["train", "calib", "heldout", "wordorder", "external"]


@dataclass(frozen=True, slots=True)
class LabelledPair:
    id: str
    a: str
    b: str
    match: bool
    kind: str
    source: str


def _pair(raw: dict[str, object], source: str | None = None) -> LabelledPair:
    return LabelledPair(
        id=str(raw["id"]),
        a=str(raw["a"]),
        b=str(raw["b"]),
        match=bool(raw["match"]),
        kind=str(raw["kind"]),
        source=source or str(raw.get("source", "project")),
    )


def _tune_part(raw: dict[str, object]) -> str:
    key = str(raw.get("template") or raw["id"])
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    return "calib" if digest / 0xFFFFFFFF < TUNE_CALIB_SHARE else "train"


def _jsonl(path: object) -> list[dict[str, object]]:
    from pathlib import Path

    lines = Path(str(path)).read_bytes().splitlines()
    return [orjson.loads(line) for line in lines if line.strip()]


def verifier_pairs(part: Part) -> list[LabelledPair]:
    if part == "external":
        return [_pair(p) for p in _jsonl(EXTERNAL)]
    if part == "heldout":
        return [_pair(p, "project") for p in load_pairs("heldout")]
    word_order = _jsonl(WORD_ORDER) if WORD_ORDER.exists() else []
    if part == "wordorder":
        return [_pair(p, "project") for p in word_order if p["split"] == "heldout"]
    public = [_pair(p) for p in _jsonl(TRAIN_PAIRS) if p["split"] == part]
    tune = load_pairs("tune") + (_jsonl(TUNE_EXTRA) if TUNE_EXTRA.exists() else [])
    tune += [p for p in word_order if p["split"] == "tune"]
    return public + [_pair(p, "project") for p in tune if _tune_part(p) == part]
