"""The paraphrase rewrites behind cache_pairs_generated.jsonl: each maps a question to one
that must get the same answer (None: it does not apply to that question)."""

from __future__ import annotations

import re
from collections.abc import Callable

_WRAP = re.compile(r"^(.*?)[?.!]?$")


def _wrap(before: str, after: str = "") -> Callable[[str], str | None]:
    def rewrite(text: str) -> str | None:
        core = _WRAP.match(text)
        assert core is not None
        body = core.group(1)
        body = body[0].lower() + body[1:] if before else body
        return f"{before}{body}{after}?" if text.endswith("?") else f"{before}{body}{after}."

    return rewrite


def _sub(pattern: str, repl: str) -> Callable[[str], str | None]:
    regex = re.compile(pattern)

    def rewrite(text: str) -> str | None:
        out = regex.sub(repl, text, count=1)
        return out if out != text else None

    return rewrite


def _front(text: str) -> str | None:
    """Move the last prepositional phrase to the front: 'How do I X in python?' ->
    'In python, how do I X?'."""
    m = re.match(r"^(.+?) ((?:in|on|at|during|for|with|without|before|after) [^,?]+)\?$", text)
    if not m:
        return None
    head, phrase = m.groups()
    return f"{phrase[0].upper()}{phrase[1:]}, {head[0].lower()}{head[1:]}?"


def _embedded(text: str) -> str | None:
    m = re.match(r"^(What|Who|Where|Which|Why|How) (is|are|was) (.+)\?$", text)
    if not m:
        return None
    wh, verb, rest = m.groups()
    return f"Can you tell me {wh.lower()} {rest} {verb}?"


SYNONYMS = (
    ("big", "large"), ("fast", "quick"), ("start", "begin"), ("buy", "purchase"),
    ("show", "display"), ("fix", "repair"), ("error", "mistake"), ("help", "assist"),
    ("make", "create"), ("delete", "remove"), ("find", "locate"), ("safe", "secure"),
    ("happy", "glad"), ("tired", "exhausted"), ("explain", "describe"), ("write", "compose"),
)  # fmt: skip

PARAPHRASES: list[tuple[str, str, object]] = [
    ("para_case-t00", "para_case", lambda t: t.lower().rstrip("?.")),
    ("para_case-t01", "para_case", lambda t: t.upper()),
    ("para_case-t02", "para_case", lambda t: t.rstrip("?.") + " ??"),
    ("para_case-t03", "para_case", lambda t: "  " + t.replace(" ", "  ")),
    ("para_politeness-t00", "para_politeness", _wrap("Please, ")),
    ("para_politeness-t01", "para_politeness", _wrap("Could you tell me ", "")),
    ("para_politeness-t02", "para_politeness", _wrap("", ", thanks")),
    ("para_politeness-t03", "para_politeness", _wrap("Hey, quick question: ")),
    ("para_politeness-t04", "para_politeness", _wrap("Hi! ", ", thank you")),
    ("para_politeness-t05", "para_politeness", _wrap("I would like to know: ")),
    ("para_contraction-t00", "para_contraction", _sub(r"\bWhat is\b", "What's")),
    ("para_contraction-t01", "para_contraction", _sub(r"\bis not\b|\bnot\b", "n't")),
    ("para_contraction-t02", "para_contraction", _sub(r"\bdo not\b", "don't")),
    ("para_contraction-t03", "para_contraction", _sub(r"\bI am\b|\bit is\b", "it's")),
    ("para_contraction-t04", "para_contraction", _sub(r"\b(How|Who|Where) is\b", r"\1's")),
    ("para_reorder-t00", "para_reorder", _front),
    ("para_reorder-t01", "para_reorder", _sub(r"^(.+?) (in|on|at) ([a-z]+)\?$", r"\2 \3, \1?")),
    ("para_embedded-t00", "para_embedded", _embedded),
    ("para_typo-t00", "para_typo", None),
    *[
        (f"para_synonym-t{i:02d}", "para_synonym", _sub(rf"\b{a}\b", b))
        for i, (a, b) in enumerate(SYNONYMS)
    ],
]
