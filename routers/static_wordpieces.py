"""The static embedder's wordpiece ids of an ASCII text, a word at a time from a memo.

``tokenizers`` costs about 0.5 µs of CPU a character on an AVX2 core (73 µs for a
146-character prompt in the gateway), most of it building an ``Encoding`` (offsets,
masks, words) the static embedder never reads. The table needs only the ids, and
MiniLM's pipeline is simple enough for ASCII text to do in a few regex passes: its
``BertNormalizer`` drops control characters, turns ``\\t \\n \\r`` into spaces and
lowercases; its ``BertPreTokenizer`` splits at whitespace and makes every punctuation
character a word of its own. Each word's wordpieces are then the model's own answer
(``WordPiece.tokenize``), remembered, so a word seen before costs a dict probe. Any
other text (accents, CJK, other scripts, where Unicode categories decide) goes to
``tokenizers`` whole. ``tests/routers/test_static_embedder.py`` checks the ids equal
the tokenizer's on every routing prompt the project ships and on edge cases.
"""

from __future__ import annotations

import re
from typing import Any

# ASCII's control characters (Unicode category Cc) but the three the normaliser keeps as
# whitespace; it drops them, where Python's ``str.split`` would split at some of them.
_CONTROLS = dict.fromkeys([*range(0, 9), 11, 12, *range(14, 32), 127])
# Rust's ``is_ascii_punctuation``: every printable ASCII character but letters and digits.
_PUNCT = r"!-/:-@\[-`{-~"
_WORDS = re.compile(rf"[^ \t\n\r{_PUNCT}]+|[{_PUNCT}]")


class AsciiWordpieces:
    """Ids of ``tokenizer`` (a BERT-normalised WordPiece ``tokenizers.Tokenizer``) for
    ASCII texts, at most ``max_tokens`` of them; None for a text it leaves to the tokenizer.
    ``memo`` bounds the words remembered (the memo starts over when full)."""

    def __init__(self, tokenizer: Any, max_tokens: int, memo: int = 50_000) -> None:
        self._model = tokenizer.model
        self.max_tokens = max_tokens
        self.memo = memo
        self._pieces: dict[str, list[int]] = {}

    def ids(self, text: str) -> list[int] | None:
        if not text.isascii():
            return None
        words = _WORDS.findall(text.translate(_CONTROLS).lower())
        out: list[int] = []
        pieces = self._pieces
        for word in words:
            found = pieces.get(word)
            if found is None:
                found = self._learn(word)
            out += found
            if len(out) >= self.max_tokens:
                return out[: self.max_tokens]
        return out

    def _learn(self, word: str) -> list[int]:
        if len(self._pieces) >= self.memo:
            self._pieces.clear()
        found = [token.id for token in self._model.tokenize(word)]
        self._pieces[word] = found
        return found
