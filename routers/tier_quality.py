"""The per-tier quality seam: for each configured tier, P(its answer is acceptable).

``TierQuality`` is ``routers/quality.py``'s protocol (``tiers``, ``predict``, and
``logits``, which a recalibration works on); the refit of ``routers/refit.py`` is written
against it, so it layers over the shipped per-tier model (``TierView``) or over
``ComplexityQuality``, the complexity model read through the protocol (what a refit
layers over when no per-tier model is loaded).

``ServedQuality`` is what routing reads once per request (``QualitySource.served``): the
model that predicts, and which one it is (the base, or the refit the feedback store serves
as version ``version``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from routers.classifier import HEAD_LARGE, HEAD_MORE, ComplexityModel
from routers.quality import TierQuality

__all__ = ["FLOOR", "Array", "ComplexityQuality", "QualitySource", "ServedQuality", "TierQuality"]

Array = npt.NDArray[np.float32]
# No prediction is more certain than this: a logit stays finite, a refit can move it.
FLOOR = 0.02


@dataclass(frozen=True, slots=True)
class ServedQuality:
    """The per-tier model one request is routed by (read once, at routing)."""

    quality: TierQuality
    version: int  # the feedback store's serving version (-1: not read yet)
    refit: bool  # True: a refit layered over the base; False: the base model

    def describe(self) -> dict[str, object]:
        """For ``/v1/route``: which model predicted."""
        return {"model": "refit" if self.refit else "base", "version": self.version}


class QualitySource(Protocol):
    """Who holds the model to route by (the feedback loop's serving refit)."""

    def served(self) -> ServedQuality | None:
        """The serving model now (None: none loaded, route by the classifier's own)."""
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
