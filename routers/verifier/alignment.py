"""Whether two questions ask the same thing: a token-alignment check.

A sentence embedding cannot tell "sort ascending" from "sort descending", "possible"
from "impossible" or "before the meeting" from "after the meeting": one changed word
moves the vector less than a rewording does. So a semantic hit is only served when
every difference between the two texts is an edit known to keep the meaning:

- case, punctuation, whitespace, articles and filler words ("please", "just");
- contractions ("what's" = "what is", "don't" = "do not");
- politeness wrappers at either end ("could you tell me", "thanks");
- agreement inflection: plural -s/-es/-ies, does/do, has/have, are/is, were/was
  (never tense: "was" and "is" stay different);
- numbers written as words ("five" = "5", "forty-two" = "42");
- a misspelt word one edit away from the other text's word, when the misspelling is
  not itself an English word (WordNet's lemma list, ``wordnet-lookup``);
- an auxiliary moved ("what the capital of France is" = "what is the capital...");
- a fronted phrase moved to the end ("At sea level, how..." = "How ... at sea level").

Any other difference, a changed, added or removed content word, or content words in
another order (a role reversal), refuses the hit. Pure functions of text, no embedding:
the check runs on the cache's lookup path after the vector search.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from typing import Literal

from routers.verifier.guard import reordered, same_names

_TOKEN = re.compile(r"[a-z0-9]+(?:[+#]+|(?:['_.\-][a-z0-9]+)*)")
_CONTRACTIONS = (
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"\bcan't\b"), "can not"),
    (re.compile(r"\bshan't\b"), "shall not"),
    (re.compile(r"\bcannot\b"), "can not"),
    (re.compile(r"\blet's\b"), "let us"),
    (re.compile(r"n't\b"), " not"),
    (re.compile(r"'re\b"), " are"),
    (re.compile(r"'m\b"), " am"),
    (re.compile(r"'ve\b"), " have"),
    (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'d\b"), " would"),
    (
        re.compile(r"\b(what|where|how|who|when|why|which|it|that|there|here|he|she)'s\b"),
        r"\1 is",
    ),
)
_FILLER = frozenset(
    "a an the please pls plz just actually exactly really kindly basically hey hi hello "
    "um uh ok okay so".split()
)
_LEADING = tuple(
    tuple(p.split())
    for p in (
        "can you tell me",
        "could you tell me",
        "would you tell me",
        "will you tell me",
        "can you explain",
        "could you explain",
        "i would like to know",
        "i want to know",
        "i wonder",
        "i was wondering",
        "do you know",
        "tell me",
        "quick question",
        "question",
        "can you",
        "could you",
        "would you",
        "will you",
        "would you mind",
        "help me understand",
    )
)
_TRAILING = tuple(
    tuple(p.split())
    for p in ("thanks in advance", "thank you", "thanks", "for me", "if you can", "if possible")
)
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9]+s?\b")
_WRAPPERS = frozenset(_LEADING + _TRAILING)
# Agreement, not tense: the left word means the same as the right one.
_AGREEMENT = {"does": "do", "has": "have", "are": "is", "were": "was", "am": "is"}
# Words whose final s is no plural (or whose plural changes the meaning).
_NOT_PLURAL = frozenset(
    "is was has does this its us yes as thus bus gas plus news less always perhaps "
    "series species means physics mathematics politics economics glasses goods arms "
    "customs clothes sometimes whereas".split()
)
AUXILIARIES = frozenset("is was do did can could will would should shall may might must".split())
_FRONTING = frozenset(
    "at in on for if when while during before after by with without given assuming from "
    "since using under as".split()
)
_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen".split()
)
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORDS = {w: i for i, w in enumerate(_UNITS)} | {w: 20 + 10 * i for i, w in enumerate(_TENS)}


def _contract(text: str) -> str:
    text = text.lower().replace("\u2019", "'").replace("`", "'")
    for pattern, repl in _CONTRACTIONS:
        text = pattern.sub(repl, text)
    return text


def _numbers(tokens: list[str]) -> list[str]:
    """'forty-two' / 'forty two' / 'five hundred' -> digits; other tokens unchanged."""
    out: list[str] = []
    value: int | None = None
    for token in tokens:
        parts = token.split("-")
        if all(p in _NUMBER_WORDS for p in parts) and len(parts) <= 2:
            value = (value or 0) + sum(_NUMBER_WORDS[p] for p in parts)
            continue
        if token in ("hundred", "thousand") and value is not None:
            value *= 100 if token == "hundred" else 1000
            continue
        if value is not None:
            out.append(str(value))
            value = None
        out.append(token)
    if value is not None:
        out.append(str(value))
    return out


def _strip_wrappers(tokens: list[str]) -> list[str]:
    changed = True
    while changed and tokens:
        changed = False
        for phrase in _LEADING:
            if tuple(tokens[: len(phrase)]) == phrase and len(tokens) > len(phrase):
                tokens, changed = tokens[len(phrase) :], True
        for phrase in _TRAILING:
            if tuple(tokens[-len(phrase) :]) == phrase and len(tokens) > len(phrase):
                tokens, changed = tokens[: -len(phrase)], True
    return tokens


def _canonical(token: str) -> str:
    token = _AGREEMENT.get(token, token)
    if token in _NOT_PLURAL or not token.isalpha() or len(token) < 4:
        return token
    # Only when the singular is an English word: "https" is no plural of "http".
    known = _lexicon()
    if token.endswith("ies") and len(token) > 4 and known(token[:-3] + "y"):
        return token[:-3] + "y"
    if token.endswith(("ches", "shes", "sses", "xes", "zes")) and known(token[:-2]):
        return token[:-2]
    if token.endswith("s") and not token.endswith("ss") and known(token[:-1]):
        return token[:-1]
    return token


_ARTICLES = frozenset("a an the".split())


@lru_cache(maxsize=1024)  # the stored texts asked about most often
def _chunks(text: str, dropped: frozenset[str] = _FILLER) -> tuple[tuple[str, ...], ...]:
    """The text's comma/semicolon-separated phrases, each as canonical tokens, without
    the ``dropped`` words (the fillers; for word order, the articles only)."""
    # Acronyms keep their final s ("HTTPS"), unless the whole text is upper case.
    acronyms = set() if text.isupper() else {w.lower() for w in _ACRONYM.findall(text)}
    out = []
    for phrase in re.split(r"[,;:]", _contract(text)):
        tokens = _numbers(_TOKEN.findall(phrase))
        out.append([t for t in tokens if t not in dropped])
    out = [chunk for chunk in out if chunk and tuple(chunk) not in _WRAPPERS]
    if out:
        out[0] = _strip_wrappers(out[0])
        out[-1] = _strip_wrappers(out[-1])
    return tuple(
        tuple(t if t in acronyms else _canonical(t) for t in chunk) for chunk in out if chunk
    )


def _one_edit(a: str, b: str) -> bool:
    """Damerau-Levenshtein distance exactly 1 (substitution, insertion, deletion, swap)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diff) == 1:
            return True
        i = diff[0]
        return len(diff) == 2 and diff[1] == i + 1 and a[i] == b[i + 1] and a[i + 1] == b[i]
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


@cache
def _lexicon() -> Callable[[str], bool]:
    from wordnet_lookup import is_wordnet_term

    return is_wordnet_term  # type: ignore[no-any-return]


def load_lexicon() -> None:
    """Load the word list now (about 0.5 s), so that no lookup pays for it."""
    _lexicon()("word")


def _typo(a: str, b: str) -> bool:
    """A misspelling: one edit inside the word (not at its end: "http"/"https" is no typo),
    and exactly one of the two is an English word."""
    if not (a.isalpha() and b.isalpha()) or min(len(a), len(b)) < 4 or not _one_edit(a, b):
        return False
    if len(a) != len(b) and (a.startswith(b) or b.startswith(a)):
        return False
    known = _lexicon()
    return known(a) != known(b)


def _aligned(a: Sequence[str], b: Sequence[str]) -> bool:
    """Equal, up to misspellings and one moved auxiliary."""
    if len(a) == len(b):
        if all(x == y or _typo(x, y) for x, y in zip(a, b, strict=True)):
            return True
    if len(a) != len(b) or sorted(a) != sorted(b):
        return False
    for aux in AUXILIARIES & set(a):
        if [t for t in a if t != aux] == [t for t in b if t != aux]:
            return True
    return False


def _fronted(a: tuple[tuple[str, ...], ...], b: tuple[tuple[str, ...], ...]) -> bool:
    """``b`` is ``a`` with fronted phrases (``at sea level, ...``) moved, or the reverse."""
    flat_b = [t for chunk in b for t in chunk]
    for x, y in ((a, flat_b), (b, [t for chunk in a for t in chunk])):
        if len(x) < 2 or len(x) > 4:
            continue
        for order in itertools.permutations(range(len(x))):
            moved = [x[i] for i in order]
            if order == tuple(range(len(x))) or x[order[-1]][0] not in _FRONTING:
                continue
            if [t for chunk in moved for t in chunk] == y:
                return True
    return False


def canonical_tokens(text: str) -> list[str]:
    """The text's tokens as the alignment compares them (fillers and wrappers dropped,
    contractions expanded, number words as digits, plurals singular)."""
    return [t for chunk in _chunks(text) for t in chunk]


def order_tokens(text: str) -> list[str]:
    """``canonical_tokens`` with the filler words kept: where "just" or "really" sits
    can change the question ("just slow or really broken")."""
    return [t for chunk in _chunks(text, _ARTICLES) for t in chunk]


def same_question(a: str, b: str) -> bool:
    """Whether ``b`` may be answered with ``a``'s answer (differences keep the meaning)."""
    ca, cb = _chunks(a), _chunks(b)
    flat_a = [t for chunk in ca for t in chunk]
    flat_b = [t for chunk in cb for t in chunk]
    if not flat_a or not flat_b:
        return False
    return _aligned(flat_a, flat_b) or _fronted(ca, cb)


Verification = Literal["strict", "guard"]


def verified(mode: Verification, cached: str, asked: str) -> bool:
    """The per-tenant check after the similarity test. ``strict``: ``same_question``;
    ``guard``: the guard in the prefix, the same proper names, not the same words reordered."""
    if mode == "strict":
        return same_question(cached, asked)
    return same_names(cached, asked) and not reordered(cached, asked)
