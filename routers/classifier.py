"""The complexity classifier: embedding + text features → P(needs more than the smallest tier).

The model is plain arrays (a standardiser and one logistic head per question), stored
as ``.npz`` without pickles, so loading a file never runs code. Inference is a dot
product; sklearn is needed only to train (``routers/training/complexity_fit.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from routers.embedding import EmbeddingOnce
from routers.features import FEATURES, message_text, text_features
from routers.quality import TierQuality

SHIPPED_MODEL = Path(__file__).resolve().parent / "model" / "complexity.npz"
HEAD_MORE = "needs_more_than_smallest"
HEAD_LARGE = "needs_large"
# Conversations up to this many characters get their text features on the event loop
# (about 0.3 µs a character: 4096 characters hold it for ~1 ms at most).
INLINE_CHARS = 4096

Array = npt.NDArray[np.float32]


class ModelFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ComplexityScore:
    score: float  # P(needs more than the smallest tier)
    p_large: float | None  # P(needs the large tier), when the model has that head
    features: Mapping[str, float]
    quality: tuple[float, ...] | None = None  # per configured tier: P(answer acceptable)


@dataclass(frozen=True)
class ComplexityModel:
    """Standardise ``[embedding, features]``, then one logistic head per row of ``coef``."""

    embedder: str
    features: tuple[str, ...]
    heads: tuple[str, ...]
    mean: Array
    scale: Array
    coef: Array  # (heads, dim)
    intercept: Array  # (heads,)
    info: Mapping[str, Any]

    def probabilities(self, vectors: Array, features: Array) -> Array:
        """``(n, heads)`` probabilities for ``n`` rows of embeddings and features."""
        x = np.concatenate([vectors, features], axis=1).astype(np.float32)
        z = ((x - self.mean) / self.scale) @ self.coef.T + self.intercept
        return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)

    def save(self, path: Path) -> None:
        meta = {
            "embedder": self.embedder,
            "features": list(self.features),
            "heads": list(self.heads),
            "info": dict(self.info),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            np.savez_compressed(
                handle,
                meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
                mean=self.mean.astype(np.float32),
                scale=self.scale.astype(np.float32),
                coef=self.coef.astype(np.float32),
                intercept=self.intercept.astype(np.float32),
            )

    @classmethod
    def load(cls, path: Path | None = None) -> ComplexityModel:
        path = path or SHIPPED_MODEL
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                arrays = {k: np.asarray(data[k], dtype=np.float32) for k in _ARRAYS}
        except (OSError, KeyError, ValueError) as exc:
            raise ModelFormatError(f"{path}: not a complexity model: {exc}") from exc
        if tuple(meta["features"]) != FEATURES:
            raise ModelFormatError(f"{path}: trained on other features: {meta['features']}")
        if arrays["coef"].shape[1] != arrays["mean"].shape[0] or HEAD_MORE not in meta["heads"]:
            raise ModelFormatError(f"{path}: inconsistent shapes or heads")
        return cls(
            embedder=meta["embedder"],
            features=tuple(meta["features"]),
            heads=tuple(meta["heads"]),
            info=meta.get("info", {}),
            **arrays,
        )


_ARRAYS = ("mean", "scale", "coef", "intercept")


class Classifier(Protocol):
    async def classify(
        self,
        messages: Sequence[Mapping[str, Any]],
        embedding: EmbeddingOnce,
        quality: TierQuality | None = None,
    ) -> ComplexityScore:
        """The score; per-tier predictions from ``quality`` (None: the classifier's own)."""
        ...


class ComplexityClassifier:
    """The shipped (or an operator's) model over the request's shared embedding."""

    def __init__(self, model: ComplexityModel, quality: TierQuality | None = None) -> None:
        self.model = model
        self.quality = quality  # per-tier predictions beside the score (routing.objective)
        self._more = model.heads.index(HEAD_MORE)
        self._large = model.heads.index(HEAD_LARGE) if HEAD_LARGE in model.heads else None

    def classify_many(
        self,
        conversations: Sequence[Sequence[Mapping[str, Any]]],
        last_user: Sequence[str],
        vectors: Array,
        quality: TierQuality | None = None,
    ) -> list[ComplexityScore]:
        features = np.stack(
            [text_features(c, t) for c, t in zip(conversations, last_user, strict=True)]
        )
        probs = self.model.probabilities(vectors, features)
        quality = quality or self.quality
        per_tier = None if quality is None else quality.predict(vectors, features)
        return [
            ComplexityScore(
                score=float(p[self._more]),
                p_large=None if self._large is None else float(p[self._large]),
                features={name: round(float(v), 4) for name, v in zip(FEATURES, f, strict=True)},
                quality=None if per_tier is None else tuple(float(q) for q in per_tier[i]),
            )
            for i, (p, f) in enumerate(zip(probs, features, strict=True))
        ]

    async def classify(
        self,
        messages: Sequence[Mapping[str, Any]],
        embedding: EmbeddingOnce,
        quality: TierQuality | None = None,
    ) -> ComplexityScore:
        vector = await embedding.get()
        if sum(len(message_text(m)) for m in messages) <= INLINE_CHARS:
            # A thread hop costs more CPU than the regexes over a short conversation.
            return self.classify_many([messages], [embedding.text], vector[None, :], quality)[0]
        # A long one would hold the loop for milliseconds: off it (GIL switches let
        # the loop in meanwhile).
        scores = await asyncio.to_thread(
            self.classify_many, [messages], [embedding.text], vector[None, :], quality
        )
        return scores[0]
