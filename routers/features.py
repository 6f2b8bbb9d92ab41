"""Cheap text features of a whole conversation, beside the embedding of its last user turn.

The embedding sees only the first tokens of the last user message; these see everything:
how long, how many turns, code, maths, constraints, the kind of question. Each is a
number; the classifier standardises them. ``FEATURES`` fixes their order, which the
shipped model records, so a model and this module cannot drift apart unnoticed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FEATURES: tuple[str, ...] = (
    "log_chars_total",
    "log_words_last",
    "turns",
    "has_system",
    "code_fence",
    "code_tokens",
    "math_symbols",
    "digits_ratio",
    "numbers",
    "latex",
    "constraints",
    "list_items",
    "multiple_choice",
    "question_marks",
    "sentences",
    "q_factoid",
    "q_reasoning",
    "q_generate",
    "q_solve",
    "avg_word_len",
)

_CODE = re.compile(
    r"\b(def|class|import|return|function|const|let|var|public|static|void|#include|SELECT|lambda)\b"
    r"|[{};]\s*$|==|!=|->|=>",
    re.MULTILINE,
)
_MATH = re.compile(r"[=+\-*/^<>%√∑∫π]|\b(?:sqrt|log|sin|cos)\b")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_LATEX = re.compile(r"\\(frac|sum|int|sqrt|cdot|times|le|ge|alpha|beta|theta|pi)\b|\$[^$]+\$")


class _Words:
    """A case-insensitive pattern of lowercase words. On ASCII text it runs case-sensitively
    on the lowercased text: the same matches (ASCII folds only A-Z), at a third of the CPU
    of ``re.IGNORECASE``; other text gets the case-folding pattern."""

    def __init__(self, source: str) -> None:
        self._folding = re.compile(source, re.IGNORECASE)
        self._plain = re.compile(source)

    def count(self, text: str, lowered: str | None) -> float:
        """``log1p`` of the matches in ``text`` (``lowered``: its lowercase, if ASCII)."""
        found = self._folding.findall(text) if lowered is None else self._plain.findall(lowered)
        return math.log1p(len(found))

    def found(self, text: str, lowered: str | None) -> float:
        hit = self._folding.search(text) if lowered is None else self._plain.search(lowered)
        return float(hit is not None)


_CONSTRAINT = _Words(
    r"\b(must|should|at least|at most|exactly|without|only|do not|don't|never|always|"
    r"format|json|step by step|in \d+ words|no more than|ensure|make sure)\b"
)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.MULTILINE)
_CHOICE = re.compile(r"^\s*\(?[A-Ea-e][.)]\s+\S", re.MULTILINE)
_SENTENCE = re.compile(r"[.!?](?:\s|$)")
_FACTOID = _Words(r"^\s*(what|who|when|where|which|name|how many|how much)\b")
_REASONING = _Words(r"\b(why|explain|compare|analy[sz]e|evaluate|justify|reason)\b")
_GENERATE = _Words(r"\b(write|create|generate|implement|design|draft|compose|build)\b")
_SOLVE = _Words(r"\b(solve|prove|derive|calculate|compute|find|determine|show that)\b")
_WORD = re.compile(r"\S+")
_QUESTION = re.compile(r"\?")
# What the counting features read of each text: 13x the longest prompt the shipped model
# learnt from (4,868 characters, data/routing), so no row of its data is cut, while a
# 3 MB prompt costs what 64 kB does (reading all of it: ~10 s of the classifier's thread
# on a loaded 2-core box, ahead of every request batched with it). ``log_chars_total``
# is still the whole length.
FEATURE_CHARS = 65_536


def message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def _count(pattern: re.Pattern[str], text: str) -> float:
    return math.log1p(len(pattern.findall(text)))


def _lower_ascii(text: str) -> str | None:
    return text.lower() if text.isascii() else None


def _digits(text: str, ascii_only: bool) -> int:
    if ascii_only:  # ten counts in C, not a generator over every character
        return sum(map(text.count, "0123456789"))
    return sum(c.isdigit() for c in text)


def text_features(messages: Sequence[Mapping[str, Any]], last_user: str) -> npt.NDArray[np.float32]:
    """One row in ``FEATURES`` order; ``last_user`` is what the embedder sees."""
    texts = [message_text(m) for m in messages]
    total = sum(len(t) for t in texts) + max(len(texts) - 1, 0)  # of the joined text
    everything = "\n".join(texts)[:FEATURE_CHARS]
    last_user = last_user[:FEATURE_CHARS]
    words = _WORD.findall(last_user)
    chars = max(len(everything), 1)
    lower_all, lower_last = _lower_ascii(everything), _lower_ascii(last_user)
    values = (
        math.log1p(total),
        math.log1p(len(words)),
        math.log1p(sum(1 for m in messages if m.get("role") == "user")),
        float(any(m.get("role") == "system" for m in messages)),
        math.log1p(everything.count("```")),
        _count(_CODE, everything),
        _count(_MATH, last_user),
        _digits(everything, lower_all is not None) / chars,
        _count(_NUMBER, last_user),
        _count(_LATEX, everything),
        _CONSTRAINT.count(everything, lower_all),
        _count(_LIST_ITEM, last_user),
        float(len(_CHOICE.findall(last_user)) >= 2),
        _count(_QUESTION, last_user),
        _count(_SENTENCE, last_user),
        _FACTOID.found(last_user, lower_last),
        _REASONING.found(last_user, lower_last),
        _GENERATE.found(last_user, lower_last),
        _SOLVE.found(last_user, lower_last),
        (sum(len(w) for w in words) / len(words)) if words else 0.0,
    )
    return np.asarray(values, dtype=np.float32)


def prompt_messages(prompt: str) -> list[Mapping[str, Any]]:
    """A bare prompt as the one-turn conversation it stands for."""
    return [{"role": "user", "content": prompt}]
