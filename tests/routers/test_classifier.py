"""Classifying one request: short conversations on the loop, long ones in a thread, the
same scores as the batch path either way."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from routers.classifier import INLINE_CHARS, ComplexityClassifier, ComplexityModel
from routers.embedding import EmbeddingOnce


class HashEmbedder:
    """A deterministic stand-in for the model, with the embedder protocol."""

    dim = 384

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = []
        for text in texts:
            v = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(self.dim)
            rows.append((v / np.linalg.norm(v)).astype(np.float32))
        return np.stack(rows)

    async def aclose(self) -> None:
        return None


async def test_inline_and_threaded_classification_match_the_batch_path() -> None:
    classifier = ComplexityClassifier(ComplexityModel.load())
    embedder = HashEmbedder()
    short = [{"role": "user", "content": "What is 2 + 2?"}]
    long_text = "Prove that the sum of two even numbers is even. " * (INLINE_CHARS // 40)
    long = [{"role": "system", "content": "Be rigorous."}, {"role": "user", "content": long_text}]
    assert len(long_text) > INLINE_CHARS  # this one takes the thread
    for messages in (short, long):
        text = str(messages[-1]["content"])
        one = await classifier.classify(messages, EmbeddingOnce(embedder, text))
        vectors = await embedder.embed([text])
        (batch,) = classifier.classify_many([messages], [text], vectors)
        assert one == batch
        assert 0.0 <= one.score <= 1.0
