"""A lower bound on a prompt's token count, from its length alone: no tokenising (and
llama.cpp's pieces read whole, which ``llama_cpp.Llama.detokenize`` does not).

Tokenising a prompt costs about a microsecond per byte on CPU (a 3 MB prompt: seconds
of engine time) and a prompt over the context is refused after it. The bound lets an
engine refuse a prompt certain to be over before it tokenises anything.

Why it holds: the byte-level BPE and SentencePiece (SPM) tokenizers of llama.cpp are
lossless — the tokens of a text detokenize to that text (SPM adds one leading space) —
so each token stands for at most ``max_bytes`` of its bytes, the longest piece in the
vocabulary; a text of ``n`` bytes then has at least ``ceil(n / max_bytes)`` tokens. One
byte is added to the longest piece for the leading space a lone SPM piece may lose, and
it is at least 4 (an unknown character, up to 4 UTF-8 bytes, is one token). Tokenizers
that normalise their input (WPM, UGM, RWKV) may drop bytes: no bound for them.
"""

from __future__ import annotations

from typing import Any

# llama.cpp's ``enum llama_vocab_type``: the lossless ones.
LOSSLESS_VOCABS = {1: "spm", 2: "bpe"}
MIN_BYTES = 4
_PROBE = 8  # bytes: most pieces fit; a longer one reports its length instead


def max_token_bytes(llama: Any) -> int | None:
    """The most bytes of a text one token of ``llama``'s vocabulary can stand for (special
    tokens included, as the engine tokenises with them), or None when no bound holds.
    One pass over the vocabulary: about 0.25 s for 49k tokens, once, at load."""
    import ctypes

    from llama_cpp import llama_cpp

    vocab = llama._model.vocab
    if llama_cpp.llama_vocab_type(vocab) not in LOSSLESS_VOCABS:
        return None
    # A piece's length from llama.cpp itself: a buffer too small for the piece returns
    # minus its length (``Llama.detokenize`` cuts pieces at 32 bytes: not that).
    buffer = ctypes.create_string_buffer(_PROBE)

    def length(token: int) -> int:
        written = int(llama_cpp.llama_token_to_piece(vocab, token, buffer, _PROBE, 0, True))
        return -written if written < 0 else written

    longest = max(length(t) for t in range(llama.n_vocab()))
    return max(longest + 1, MIN_BYTES)


def piece(llama: Any, token: int, special: bool = False) -> bytes:
    """The token's bytes, whole: ``Llama.detokenize`` gives nothing for a piece over 32
    bytes (SmolLM2 has 47: runs of spaces, a newline and 80 spaces…), which a generated
    text would silently lose."""
    import ctypes

    from llama_cpp import llama_cpp

    vocab, size = llama._model.vocab, 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        written = int(llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, special))
        if written >= 0:
            return buffer.raw[:written]
        size = -written


def fewest_tokens(text: str, max_bytes: int) -> int:
    """At least this many tokens make ``text`` (its UTF-8 length over ``max_bytes``)."""
    size = len(text) if text.isascii() else len(text.encode())
    return -(-size // max_bytes)
