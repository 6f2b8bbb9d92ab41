"""When two prompts may share an answer by meaning: the checks beyond cosine similarity.

A sentence embedding barely moves when "5 km" becomes "50 km", "is" becomes "is not",
"grams in a pound" becomes "grams in an ounce", "France" becomes "Spain", or "Alice
or Bob" becomes "Bob or Alice". So a semantic match also needs the same numbers in
the same order, the same negation count, the same units, the same proper names in
the same order, and not merely the same words reordered. Pure functions of text; the
cache and its evaluation (``routers.training.semantic_eval``) share them.
"""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[\w']+", re.UNICODE)
_NEGATIONS = frozenset("not no never none nobody nothing neither nor without cannot".split())


_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|[¿¡\"'(]+)([\w']+)", re.UNICODE)
_UNITS = {
    unit: canonical
    for canonical, variants in {
        "mm": "mm millimetre millimeter",
        "cm": "cm centimetre centimeter",
        "m": "metre meter",
        "km": "km kilometre kilometer",
        "in": "inch inches",
        "ft": "ft foot feet",
        "yd": "yard",
        "mi": "mile",
        "mph": "mph",
        "kmh": "kmh kph",
        "acre": "acre",
        "ha": "hectare",
        "mg": "mg milligram",
        "g": "gram",
        "kg": "kg kilogram kilo",
        "oz": "oz ounce",
        "lb": "lb pound",
        "st": "stone",
        "t": "ton tonne",
        "ml": "ml millilitre milliliter",
        "l": "litre liter",
        "gal": "gallon",
        "qt": "quart",
        "pt": "pint",
        "cup": "cup",
        "tbsp": "tbsp tablespoon",
        "tsp": "tsp teaspoon",
        "c": "celsius centigrade",
        "f": "fahrenheit",
        "k": "kelvin",
        "s": "second",
        "min": "minute",
        "h": "hour",
        "day": "day",
        "week": "week",
        "month": "month",
        "year": "year",
        "bit": "bit",
        "b": "byte",
        "kb": "kb kilobyte",
        "mb": "mb megabyte",
        "gb": "gb gigabyte",
        "tb": "tb terabyte",
        "w": "watt",
        "kw": "kw kilowatt",
        "hp": "horsepower",
        "cal": "calorie kcal",
        "kj": "kilojoule",
        "usd": "dollar usd",
        "eur": "euro eur",
        "gbp": "gbp sterling",
        "jpy": "yen",
    }.items()
    for unit in variants.split()
}


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def words(text: str) -> list[str]:
    """The lower-cased words of ``text``, in order."""
    return _words(text)


def _unit(word: str) -> str | None:
    for form in (
        word,
        word[:-1] if word.endswith("s") else None,
        word[:-2] if word.endswith("es") else None,
    ):
        if form and form in _UNITS:
            return _UNITS[form]
    return None


def _names(text: str) -> list[str]:
    """Capitalised words that do not start a sentence: proper names, in order."""
    starts = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    return [
        m.group().lower()
        for m in _WORD.finditer(text)
        if m.group()[:1].isupper()
        and m.start() not in starts
        and m.group() != "I"
        and _unit(m.group().lower()) is None
    ]


def proper_names(text: str) -> list[str]:
    """Capitalised words that do not start a sentence, lower-cased, in order."""
    return _names(text)


def guard(text: str) -> dict[str, Any]:
    """What must be equal for a semantic match, hashed into the semantic prefix: numbers
    in order, the units (in any order), and the negation count. Case-free, so that a
    lower- or upper-cased question still shares the prefix; proper names are compared
    after the search (``comparable``, ``routers.verifier.alignment``)."""
    words = _words(text)
    negations = sum(1 for w in words if w in _NEGATIONS or w.endswith("n't"))
    units = sorted(u for u in map(_unit, words) if u is not None)
    return {
        "numbers": _NUMBER.findall(text),
        "negations": negations,
        "units": units,
    }


def reordered(a: str, b: str) -> bool:
    """The same words in another order: swapped entities or units keep every word."""
    wa, wb = _words(a), _words(b)
    return wa != wb and sorted(wa) == sorted(wb)


def comparable(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` may match by meaning at all (before the similarity test)."""
    return guard(a) == guard(b) and _names(a) == _names(b) and not reordered(a, b)


def same_names(a: str, b: str) -> bool:
    """The same proper names in the same order (capitalised words not starting a sentence)."""
    return _names(a) == _names(b)
