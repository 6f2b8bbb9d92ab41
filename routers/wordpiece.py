"""MiniLM's own WordPiece tokenizer, for what ``/v1/embeddings`` counts and decodes.

``usage.prompt_tokens`` is the number of wordpieces the model reads (``[CLS]`` and
``[SEP]`` included), and a text longer than the embedder's window is refused rather
than silently truncated. Token-array inputs are ids in this vocabulary: they are
decoded to text, which the embedder tokenizes back to the same ids. The Rust tokenizer
runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routers.embedding import Embedder, EmbedderUnavailable, minilm_path


class WordPieces:
    def __init__(self, model_path: str | None = None) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(f"counting wordpieces needs tokenizers: {exc}") from exc
        path = Path(model_path or minilm_path()) / "tokenizer.json"
        self._tokenizer: Any = Tokenizer.from_file(str(path))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.vocab_size: int = self._tokenizer.get_vocab_size()

    def count_sync(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def decode_sync(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return [str(t) for t in self._tokenizer.decode_batch([list(i) for i in ids])]

    async def count(self, texts: Sequence[str]) -> list[int]:
        return await asyncio.to_thread(self.count_sync, texts)

    async def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return await asyncio.to_thread(self.decode_sync, ids)


@dataclass(frozen=True, slots=True)
class ServedEmbedder:
    """The classifier's embedder as ``/v1/embeddings`` serves it: the same instance (its
    micro-batcher, worker processes and LRU), its wordpieces, and its window (the
    embedder truncates past ``window`` tokens, so longer inputs are refused)."""

    embedder: Embedder
    wordpieces: WordPieces
    window: int


def serve_embedder(embedder: Embedder, window: int) -> ServedEmbedder:
    """Blocking (loads the tokenizer): call it off the loop."""
    return ServedEmbedder(embedder, WordPieces(), window)
