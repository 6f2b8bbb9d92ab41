"""Word order: the same words rearranged can ask another question.

"Is the code just slow or really broken?" and "Is the code really slow or just broken?"
use the same words; so do "Is Rust harder to learn than Go?" and "Is Go harder to learn
than Rust?". A sentence embedding puts each pair close together, a cross-encoder trained
on news and caption sentences reads them as the same, and dropping fillers ("just",
"really") makes the first pair identical to the alignment check. ``moved_words`` says when
two texts that share nearly all their words put the shared ones in another order than
one whole phrase moved (a fronted phrase: "In python, how do I…" / "How do I… in
python?", or a moved auxiliary: "what the capital is" / "what is the capital").

Pure function of text; a few list comparisons per candidate.
"""

from __future__ import annotations

from collections import Counter

from routers.verifier.alignment import AUXILIARIES, order_tokens

# Tokens one side may have that the other lacks, and the check still applies: with more,
# the texts are rewordings, and rewordings reorder freely (the verifier decides them).
# Chosen on the tune part (docs/cache.md, "Word order").
MAX_EXTRA = 2


def _shared(tokens: list[str], counts: Counter[str]) -> list[str]:
    """``tokens`` keeping only the first ``counts[t]`` occurrences of each token."""
    left = counts.copy()
    out = []
    for token in tokens:
        if left[token] > 0:
            left[token] -= 1
            out.append(token)
    return out


def _one_phrase_moved(a: list[str], b: list[str]) -> bool:
    """``b`` is ``a`` with one contiguous phrase moved: past their common start and end,
    one middle is a rotation of the other ("X Y" -> "Y X"). Two single words swapped
    ("milk chocolate" / "chocolate milk", "sleep quality" / "quality sleep") are no
    phrase moved, unless one is an auxiliary ("what is recursion" / "what recursion is")."""
    start = 0
    while start < len(a) and a[start] == b[start]:
        start += 1
    end = 0
    while end < len(a) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    ma, mb = a[start : len(a) - end], b[start : len(b) - end]
    if len(ma) == 2 and not AUXILIARIES & set(ma):
        return False
    return any(ma[p:] + ma[:p] == mb for p in range(1, len(ma)))


def moved_words(cached: str, asked: str, max_extra: int = MAX_EXTRA) -> bool:
    """Whether ``asked`` uses ``cached``'s words (up to ``max_extra`` tokens added or
    dropped on each side) in another order than one whole phrase moved."""
    a, b = order_tokens(cached), order_tokens(asked)
    counts = Counter(a) & Counter(b)
    common = sum(counts.values())
    if common < 2 or len(a) - common > max_extra or len(b) - common > max_extra:
        return False
    sa, sb = _shared(a, counts), _shared(b, counts)
    return sa != sb and not _one_phrase_moved(sa, sb)
