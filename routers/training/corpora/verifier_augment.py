"""Build data/verifier/tune_extra.jsonl: more near-misses from the project's tune frames.

    python -m routers.training.corpora.verifier_augment

``cache_pairs.py`` fills each question frame with at most 12 of its filler pairs.
For the learned verifier this fills the **tune** frames (the first half of the templates
of every kind that is not held out whole) with every other filler pair, and keeps only
the pairs the rules leave undecided (``routers.verifier.rules``): the ones the model has to
tell apart. No held-out kind, no held-out template, no held-out text: a pair sharing a
text with a held-out project pair or an evaluation pair is dropped. Each pair keeps its
template, so ``routers.training.verifier_pairs`` puts it in ``train`` or ``calib`` with the rest of
its template. Deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path

from routers.training.corpora.cache_pair_templates import FRAMES, Frame
from routers.training.corpora.verifier_pairs import norm
from routers.verifier.rules import rule_verdict

HERE = Path(__file__).resolve().parents[3] / "data"  # the checkout's data/ folder

OUT = HERE / "verifier" / "tune_extra.jsonl"


def tune_frames() -> list[Frame]:
    """The frames whose pairs ``cache_pairs.py`` put in the tune split."""
    tune = set()
    for line in (HERE / "cache_pairs_generated.jsonl").read_text().splitlines():
        pair = json.loads(line)
        if pair["split"] == "tune" and not pair["match"]:
            tune.add(pair["template"])
    return [f for f in FRAMES if f.template in tune and f.fillers]


def _tidy(text: str) -> str:
    return " ".join(text.split())


def kept_apart() -> set[str]:
    """Texts of every held-out project pair and every evaluation pair (normalised)."""
    texts: set[str] = set()
    for line in (HERE / "cache_pairs_generated.jsonl").read_text().splitlines():
        pair = json.loads(line)
        if pair["split"] == "heldout":
            texts |= {norm(pair["a"]), norm(pair["b"])}
    for line in (HERE / "verifier" / "eval_external.jsonl").read_text().splitlines():
        pair = json.loads(line)
        texts |= {norm(pair["a"]), norm(pair["b"])}
    return texts


def main() -> None:
    existing = set()
    for name in ("cache_pairs.jsonl", "cache_pairs_generated.jsonl"):
        for line in (HERE / name).read_text().splitlines():
            pair = json.loads(line)
            existing |= {(pair["a"], pair["b"]), (pair["b"], pair["a"])}
    apart = kept_apart()
    rows = []
    for frame in tune_frames():
        for i, (x, y) in enumerate(frame.fillers):
            a, b = _tidy(frame.text.format(x=x, y=y)), _tidy(frame.text.format(x=y, y=x))
            if (a, b) in existing or norm(a) in apart or norm(b) in apart:
                continue
            if rule_verdict(a, b)[0] != "undecided":
                continue
            rows.append(
                {
                    "id": f"{frame.template}-x{i:03d}",
                    "a": a,
                    "b": b,
                    "match": False,
                    "kind": frame.kind,
                    "template": frame.template,
                    "source": "project",
                    "split": "tune",
                }
            )
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} pairs -> {OUT}")


if __name__ == "__main__":
    main()
