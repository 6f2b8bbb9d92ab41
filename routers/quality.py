"""Per-tier quality: for each tier, a calibrated P(its answer is acceptable | prompt).

The model behind it (``routers/quality_training.py``) is an item-response model: every
prompt has a difficulty read off its embedding and text features, every scored model an
ability, and P(model m answers prompt x acceptably) = sigmoid(ability_m + slope_m ·
easiness(x)), calibrated per model on benchmarks the item function never saw. Folded,
each model is one logistic head over the standardised ``[embedding, features]``, stored
as plain arrays (``.npz`` without pickles), so a prediction is one small matrix product.

A configured tier stands for one of the models the file holds (``QualityModel.ladder``:
the reference model per rung, cheapest first); ``QualityModel.for_tiers`` gives the
``TierQuality`` view the objective policy reads. ``TierQuality`` is the seam: a wrapper
recalibrated on traffic labels (the feedback loop) plugs in unchanged, working on
``logits``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from routers.features import FEATURES

SHIPPED_QUALITY = Path(__file__).resolve().parent / "model" / "quality.npz"
Array = npt.NDArray[np.float32]
_ARRAYS = ("mean", "scale", "coef", "intercept", "reference_logits", "reference_chars")


class QualityFormatError(ValueError):
    pass


class TierQuality(Protocol):
    @property
    def tiers(self) -> tuple[str, ...]:
        """The configured tiers it predicts for, cheapest first (a plain attribute will do)."""
        ...

    def predict(self, vectors: Array, features: Array) -> Array:
        """``(n, len(tiers))`` P(the tier's answer is acceptable)."""
        ...

    def logits(self, vectors: Array, features: Array) -> Array:
        """``(n, len(tiers))`` the logits of ``predict`` (what a recalibration works on)."""
        ...


@dataclass(frozen=True)
class QualityModel:
    """Standardise ``[embedding, features]``, then one calibrated logistic head per model."""

    embedder: str
    features: tuple[str, ...]
    models: tuple[str, ...]  # the scored models it predicts for, one head each
    ladder: tuple[str, ...]  # the reference model of each rung, cheapest first
    mean: Array
    scale: Array
    coef: Array  # (models, dim)
    intercept: Array  # (models,)
    # Reference traffic (a sample of the training prompts): each head's logit, and the
    # prompt's characters; λ is read from it until a deployment has pooled its own.
    reference_logits: Array  # (prompts, models)
    reference_chars: Array  # (prompts,)
    info: Mapping[str, Any]

    def logits_of(self, rows: Sequence[int], vectors: Array, features: Array) -> Array:
        x = np.concatenate([vectors, features], axis=1).astype(np.float32)
        z = (x - self.mean) / self.scale
        picked = list(rows)
        logits: Array = (z @ self.coef[picked].T + self.intercept[picked]).astype(np.float32)
        return logits

    def for_tiers(
        self, tiers: Sequence[str], reference: Mapping[str, str] | None = None
    ) -> TierView:
        """The view for configured ``tiers`` (cheapest first): each tier stands for the model
        ``reference`` names, else for a rung of the ladder (by position, spread evenly)."""
        chosen = dict(reference or {})
        unknown = sorted(set(chosen.values()) - set(self.models))
        if unknown:
            raise QualityFormatError(f"no quality head for {', '.join(unknown)}")
        rungs = _spread(len(tiers), len(self.ladder))
        rows = tuple(
            self.models.index(chosen.get(tier, self.ladder[rung]))
            for tier, rung in zip(tiers, rungs, strict=True)
        )
        return TierView(self, tuple(tiers), rows)

    def save(self, path: Path) -> None:
        meta = {
            "embedder": self.embedder,
            "features": list(self.features),
            "models": list(self.models),
            "ladder": list(self.ladder),
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
                reference_logits=self.reference_logits.astype(np.float32),
                reference_chars=self.reference_chars.astype(np.float32),
            )

    @classmethod
    def load(cls, path: Path | None = None) -> QualityModel:
        path = path or SHIPPED_QUALITY
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                arrays = {k: np.asarray(data[k], dtype=np.float32) for k in _ARRAYS}
                models, ladder = tuple(meta["models"]), tuple(meta["ladder"])
        except (OSError, KeyError, ValueError) as exc:
            raise QualityFormatError(f"{path}: not a quality model: {exc}") from exc
        if tuple(meta["features"]) != FEATURES:
            raise QualityFormatError(f"{path}: trained on other features: {meta['features']}")
        if arrays["coef"].shape != (len(models), arrays["mean"].shape[0]) or not ladder:
            raise QualityFormatError(f"{path}: inconsistent shapes, models or ladder")
        if arrays["reference_logits"].shape[1:] != (len(models),):
            raise QualityFormatError(f"{path}: reference traffic of another shape")
        if not set(ladder) <= set(models):
            raise QualityFormatError(f"{path}: the ladder names a model without a head")
        return cls(
            embedder=meta["embedder"],
            features=tuple(meta["features"]),
            models=models,
            ladder=ladder,
            info=meta.get("info", {}),
            **arrays,
        )


def _spread(tiers: int, rungs: int) -> list[int]:
    """Rung per tier: one tier takes the top rung; more spread from the bottom to the top."""
    if tiers == 1:
        return [rungs - 1]
    return [round(i * (rungs - 1) / (tiers - 1)) for i in range(tiers)]


@dataclass(frozen=True)
class TierView:
    """A ``QualityModel`` read for the configured tiers: the ``TierQuality`` that serves."""

    model: QualityModel
    tiers: tuple[str, ...]
    rows: tuple[int, ...]  # the model head each tier stands for

    @property
    def stands_for(self) -> dict[str, str]:
        return {t: self.model.models[r] for t, r in zip(self.tiers, self.rows, strict=True)}

    def logits(self, vectors: Array, features: Array) -> Array:
        return self.model.logits_of(self.rows, vectors, features)

    def predict(self, vectors: Array, features: Array) -> Array:
        return _sigmoid(self.logits(vectors, features))

    def reference_logits(self) -> Array:
        """The reference traffic's logits for these tiers (a recalibration maps them too)."""
        logits: Array = self.model.reference_logits[:, list(self.rows)]
        return logits

    def reference_traffic(self) -> tuple[Array, Array]:
        """The reference traffic: per-tier P(acceptable) and each prompt's characters."""
        return _sigmoid(self.reference_logits()), self.model.reference_chars


def _sigmoid(logits: Array) -> Array:
    out: Array = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return out
