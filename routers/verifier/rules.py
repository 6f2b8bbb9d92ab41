"""The rules around the learned verifier: accept trivial edits, veto what a model misses.

``rule_verdict`` sorts a candidate pair three ways before any model runs:

- ``same``: every difference is an edit known to keep the meaning
  (``routers.verifier.alignment.same_question``: case, fillers, wrappers, typos...);
- ``different``: a hard veto the learned verifier is never asked to overrule: other
  numbers (digits or number words), another negation count, other proper names or
  acronyms, other code identifiers (``list.append`` vs ``list.extend``), the same
  words in another order (a role reversal: "Can a landlord sue a tenant?"), nearly
  the same words moved other than as one whole phrase (``routers.verifier.order``,
  fillers included), or one slot of the same question filled differently
  (``substituted``);
- ``undecided``: the learned verifier decides (``routers.verifier.model``).

Pure functions of text, microseconds per pair.
"""

from __future__ import annotations

import difflib
import re
from typing import Literal

from routers.verifier.alignment import canonical_tokens, same_question
from routers.verifier.guard import guard, proper_names, reordered, words
from routers.verifier.order import moved_words

Verdict = Literal["same", "different", "undecided"]
_CODE = re.compile(
    r"`[^`]+`"  # anything quoted as code
    r"|\b[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+(?:\(\))?"  # dotted names: list.append, os.path
    r"|\b[a-z]+(?:_[a-z0-9]+)+\b"  # snake_case
    r"|\b[a-z]+(?:[A-Z][a-z0-9]*)+\b"  # camelCase
    r"|\b\w+\(\)"  # calls: len()
    r"|(?<!\w)--?[a-z][\w-]*"  # command-line flags
)
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9]{1,}s?\b")
_NEGATING = frozenset("not no never none nothing nobody neither nor without".split())


def code_identifiers(text: str) -> list[str]:
    return sorted(m.group().strip("`") for m in _CODE.finditer(text))


def _acronyms(text: str) -> list[str]:
    if text.isupper():  # an all-caps question has no acronyms to tell apart
        return []
    return sorted(_ACRONYM.findall(text))


def other_names(cached: str, asked: str) -> bool:
    """Another proper name or acronym: one side names something (a capitalised word not
    starting a sentence, an acronym) that the other does not mention in any case, or the
    names both mention come in another order. Only capitalisation is forgiven: "Python"
    starting one question and inside the other, "git" lower-cased, "Nelson Mandela"
    written the same on both sides but one at a sentence start (in the training pairs this
    veto refused 4 true paraphrases for each near-miss of that shape, and no project
    pair). A name added, dropped or replaced stays a veto."""
    words_of = {side: words(side) for side in (cached, asked)}
    names = {
        side: set(proper_names(side)) | {a.lower() for a in _acronyms(side)}
        for side in (cached, asked)
    }
    for side, other in ((cached, asked), (asked, cached)):
        if not names[side] <= set(words_of[other]):
            return True
    both = names[cached] | names[asked]
    return _first_seen(words_of[cached], both) != _first_seen(words_of[asked], both)


def _first_seen(tokens: list[str], names: set[str]) -> list[str]:
    out: list[str] = []
    for token in tokens:
        if token in names and token not in out:
            out.append(token)
    return out


SLOT_WORDS = 2  # the widest replaced span that counts as one slot


def substituted(cached: str, asked: str) -> bool:
    """The same question with one slot filled differently: one span of at most
    ``SLOT_WORDS`` words replaced by another, every other word the same and in place
    ("sort ascending" / "sort descending", "lock" / "unlock", "before" / "after"). In the
    project's tune pairs the rules leave open, 281 of the 286 of this shape are
    different questions (each kind of near-miss there is a slot filled another way); a
    cross-encoder scoring one changed word against a whole unchanged question reads them
    as the same. A synonym swapped in ("big" / "large") is refused with them."""
    ta, tb = canonical_tokens(cached), canonical_tokens(asked)
    matcher = difflib.SequenceMatcher(a=ta, b=tb, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(changes) != 1:
        return False
    tag, i1, i2, j1, j2 = changes[0]
    return tag == "replace" and i2 - i1 <= SLOT_WORDS and j2 - j1 <= SLOT_WORDS


def _numbers_and_negations(text: str) -> tuple[list[str], int]:
    tokens = canonical_tokens(text)
    return [t for t in tokens if t.isdigit()], sum(1 for t in tokens if t in _NEGATING)


def vetoed(cached: str, asked: str) -> str | None:
    """The reason the two can never share an answer, or None."""
    if guard(cached) != guard(asked):
        return "guard"
    if _numbers_and_negations(cached) != _numbers_and_negations(asked):
        return "numbers"
    if other_names(cached, asked):
        return "entities"
    if code_identifiers(cached) != code_identifiers(asked):
        return "code"
    if (
        reordered(cached, asked)
        or sorted(canonical_tokens(cached)) == sorted(canonical_tokens(asked))
        or moved_words(cached, asked)
    ):
        return "reordered"
    if substituted(cached, asked):
        return "substituted"
    return None


def rule_verdict(cached: str, asked: str) -> tuple[Verdict, str | None]:
    """``(verdict, veto reason)``; the reason is set only for ``different``."""
    # Surrounding whitespace is no difference (and would hide a sentence start from the
    # proper-name check: " Which city..." would read "Which" as a name).
    cached, asked = cached.strip(), asked.strip()
    # The alignment drops fillers: "just slow or really broken" would be "really slow
    # or just broken" (issue 28), so words moved are checked beside it.
    if same_question(cached, asked) and not moved_words(cached, asked):
        return "same", None
    reason = vetoed(cached, asked)
    if reason is not None:
        return "different", reason
    return "undecided", None
