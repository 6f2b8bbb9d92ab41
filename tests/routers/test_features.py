"""The classifier's text features read a bounded head of each text: every row the shipped
model learnt from is read whole (the same values as without the bound), and a 3 MB
prompt costs what 64 kB does."""

from __future__ import annotations

import csv
import gzip
import time
from pathlib import Path

import numpy as np
import pytest

from routers import features
from routers.features import FEATURE_CHARS, FEATURES, text_features

DATA = Path(__file__).resolve().parents[2] / "data" / "routing"


def _prompts(name: str) -> list[str]:
    with gzip.open(DATA / name, "rt", newline="") as handle:
        return [row["prompt"] for row in csv.DictReader(handle)]


def test_no_training_prompt_reaches_the_bound() -> None:
    longest = max(len(p) for name in ("pool.csv.gz", "golden.csv.gz") for p in _prompts(name))
    assert longest * 10 < FEATURE_CHARS, longest


def test_the_bound_changes_nothing_below_it(monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = sorted(_prompts("pool.csv.gz"), key=len)[-300:]  # the longest ones
    conversations = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": p}]
        for p in prompts
    ]
    bounded = [text_features(c, p) for c, p in zip(conversations, prompts, strict=True)]
    monkeypatch.setattr(features, "FEATURE_CHARS", 10**12)
    whole = [text_features(c, p) for c, p in zip(conversations, prompts, strict=True)]
    assert np.array_equal(np.stack(bounded), np.stack(whole))


def test_a_3mb_prompt_is_read_to_the_bound_and_counted_whole() -> None:
    unit = "Prove that x^2 >= 0 for every real x; explain why, step by step. 12 + 30 = 42? "
    huge = unit * (3_000_000 // len(unit))
    head = huge[:FEATURE_CHARS]
    started = time.process_time()  # CPU seconds: what a busy host cannot stretch
    row = text_features([{"role": "user", "content": huge}], huge)
    took = time.process_time() - started
    expected = text_features([{"role": "user", "content": head}], head)
    total = FEATURES.index("log_chars_total")
    assert row[total] == pytest.approx(np.log1p(len(huge)))
    others = [i for i in range(len(FEATURES)) if i != total]
    assert np.array_equal(row[others], expected[others])
    assert took < 2.0, took  # the whole 3 MB took ~10 s of CPU on this box


def test_ascii_shortcuts_match_the_case_folding_patterns() -> None:
    """On ASCII text the keyword patterns run on the lowercased text and digits are
    counted in C: the same numbers as ``re.IGNORECASE`` and ``str.isdigit`` give, on every
    5th routing prompt the project ships and on mixed-case and non-ASCII text."""
    from routers.training.datasets import load_pool

    texts = [e.text for e in load_pool()[::5]]
    texts += [
        "WHY Must I SOLVE this? Show That 5 > 4. MAKE SURE: JSON, In 12 Words",
        "\uff37hy \u017fhould \u00b23",  # fullwidth W, long s, superscript 2
    ]
    words = [features._CONSTRAINT, features._FACTOID, features._REASONING, features._SOLVE]
    words.append(features._GENERATE)
    for text in texts:
        lowered = features._lower_ascii(text)
        for pattern in words:
            assert pattern.count(text, lowered) == pattern.count(text, None), (pattern, text)
            assert pattern.found(text, lowered) == pattern.found(text, None), (pattern, text)
        assert features._digits(text, lowered is not None) == sum(c.isdigit() for c in text)
    assert features._lower_ascii(texts[-1]) is None
