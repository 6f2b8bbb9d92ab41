"""The per-tier quality seam: for each configured tier, P(its answer is acceptable).

``TierQuality`` has the shape the routing work defines in ``routers/quality.py`` (issue
24, item 1: ``tiers``, ``predict``, and ``logits``, which a recalibration works on); until
that module is on this branch it is declared here, and the refit of ``routers/refit.py``
is written against it, so it layers over either model.
``ComplexityQuality`` reads the shipped complexity model through the protocol, so the
feedback loop runs on the shipped model today.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from routers.classifier import HEAD_LARGE, HEAD_MORE, ComplexityModel

Array = npt.NDArray[np.float32]
# No prediction is more certain than this: a logit stays finite, a refit can move it.
FLOOR = 0.02


class TierQuality(Protocol):
    tiers: tuple[str, ...]  # configured tiers, cheapest first

    def predict(self, vectors: Array, features: Array) -> Array:
        """``(n, len(tiers))`` P(acceptable) for ``n`` embeddings and feature rows."""
        ...

    def logits(self, vectors: Array, features: Array) -> Array:
        """``(n, len(tiers))`` the logits of ``predict`` (what a recalibration works on)."""
        ...


class ComplexityQuality:
    """The complexity model as per-tier quality: the smallest tier is acceptable when the
    request does not need more (1 - score); a middle tier when it does not need the large
    one (1 - P(needs large), where the model has that head); the largest tier is the
    reference the others are judged against (1 - FLOOR)."""

    def __init__(self, model: ComplexityModel, tiers: Sequence[str]) -> None:
        self.model = model
        self.tiers = tuple(tiers)
        self._more = model.heads.index(HEAD_MORE)
        self._large = model.heads.index(HEAD_LARGE) if HEAD_LARGE in model.heads else None

    def predict(self, vectors: Array, features: Array) -> Array:
        heads = self.model.probabilities(vectors, features)
        out = np.full((len(heads), len(self.tiers)), 1.0 - FLOOR, dtype=np.float32)
        if len(self.tiers) > 1:
            out[:, 0] = 1.0 - heads[:, self._more]
        if self._large is not None and len(self.tiers) > 2:
            out[:, 1:-1] = (1.0 - heads[:, self._large])[:, None]
        return np.clip(out, FLOOR, 1.0 - FLOOR).astype(np.float32)

    def logits(self, vectors: Array, features: Array) -> Array:
        p = self.predict(vectors, features)
        return np.log(p / (1.0 - p)).astype(np.float32)
