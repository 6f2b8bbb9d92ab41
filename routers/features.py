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
    "code_task",
    "code_log_chars",
    "choices",
    "choice_log_chars",
)
# Length inside a domain: within a kind of task a longer request is a harder one, by a
# slope of its own (docs/classifier.md; ``TrainOptions.stack_features``).
DOMAIN_LENGTHS: tuple[str, ...] = ("code_log_chars", "choice_log_chars")

_CODE = re.compile(
    r"\b(def|class|import|return|function|const|let|var|public|static|void|#include|SELECT|lambda)\b"
    r"|[{};]\s*$|==|!=|->|=>",
    re.MULTILINE,
)
_MATH = re.compile(r"[=+\-*/^<>%√∑∫π]|\bsqrt\b|\blog\b|\bsin\b|\bcos\b")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_LATEX = re.compile(r"\\(frac|sum|int|sqrt|cdot|times|le|ge|alpha|beta|theta|pi)\b|\$[^$]+\$")
_CONSTRAINT = re.compile(
    r"\b(must|should|at least|at most|exactly|without|only|do not|don't|never|always|"
    r"format|json|step by step|in \d+ words|no more than|ensure|make sure)\b",
    re.IGNORECASE,
)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.MULTILINE)
_CHOICE = re.compile(r"^\s*\(?[A-Ea-e][.)]\s+\S", re.MULTILINE)
_SENTENCE = re.compile(r"[.!?](?:\s|$)")
_FACTOID = re.compile(r"^\s*(what|who|when|where|which|name|how many|how much)\b", re.IGNORECASE)
_REASONING = re.compile(r"\b(why|explain|compare|analy[sz]e|evaluate|justify|reason)\b", re.I)
_GENERATE = re.compile(r"\b(write|create|generate|implement|design|draft|compose|build)\b", re.I)
_SOLVE = re.compile(r"\b(solve|prove|derive|calculate|compute|find|determine|show that)\b", re.I)
_CODE_ASK = re.compile(
    r"\b(function|program|script|method|class|algorithm|regex|query|python|java(script)?|sql|"
    r"c\+\+|rust|golang|bash)\b",
    re.IGNORECASE,
)
_CHOICE_INLINE = re.compile(r"(?:^|\s)\(?[A-Ea-e]\)\s*\S")
_WORD = re.compile(r"\S+")
_QUESTION = re.compile(r"\?")


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


def text_features(messages: Sequence[Mapping[str, Any]], last_user: str) -> npt.NDArray[np.float32]:
    """One row in ``FEATURES`` order; ``last_user`` is what the embedder sees."""
    texts = [message_text(m) for m in messages]
    everything = "\n".join(texts)
    words = _WORD.findall(last_user)
    chars = max(len(everything), 1)
    log_chars = math.log1p(len(everything))
    code = _code_task(everything, last_user)
    choices = max(len(_CHOICE.findall(last_user)), len(_CHOICE_INLINE.findall(last_user)))
    values = (
        log_chars,
        math.log1p(len(words)),
        math.log1p(sum(1 for m in messages if m.get("role") == "user")),
        float(any(m.get("role") == "system" for m in messages)),
        math.log1p(everything.count("```")),
        _count(_CODE, everything),
        _count(_MATH, last_user),
        sum(c.isdigit() for c in everything) / chars,
        _count(_NUMBER, last_user),
        _count(_LATEX, everything),
        _count(_CONSTRAINT, everything),
        _count(_LIST_ITEM, last_user),
        float(len(_CHOICE.findall(last_user)) >= 2),
        _count(_QUESTION, last_user),
        _count(_SENTENCE, last_user),
        float(bool(_FACTOID.search(last_user))),
        float(bool(_REASONING.search(last_user))),
        float(bool(_GENERATE.search(last_user))),
        float(bool(_SOLVE.search(last_user))),
        (sum(len(w) for w in words) / len(words)) if words else 0.0,
        code,
        code * log_chars,
        math.log1p(choices),
        float(choices >= 2) * log_chars,
    )
    return np.asarray(values, dtype=np.float32)


def _code_task(everything: str, last_user: str) -> float:
    """1.0 for a programming request: code in it, or a request to write one."""
    if "```" in everything or len(_CODE.findall(everything)) >= 3:
        return 1.0
    return float(bool(_GENERATE.search(last_user) and _CODE_ASK.search(last_user)))


def prompt_messages(prompt: str) -> list[Mapping[str, Any]]:
    """A bare prompt as the one-turn conversation it stands for."""
    return [{"role": "user", "content": prompt}]
