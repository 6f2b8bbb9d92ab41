"""Per-tier quality: for each tier, a calibrated P(its answer is acceptable | prompt).

The model behind it (``routers/training/quality_fit.py``) is an item-response model: every
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
from routers.quality_regions import Regions

SHIPPED_QUALITY = Path(__file__).resolve().parent / "model" / "quality.npz"
Array = npt.NDArray[np.float32]
_ARRAYS = ("mean", "scale", "coef", "intercept", "reference_logits", "reference_chars")
# optional, all or none: the regional signal check and the reference traffic's regions
_REGIONS = (
    "region_centroids",
    "region_slope",
    "region_centre",
    "region_delta",
    "region_evidence",
    "region_min_evidence",
    "reference_region",
)


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
    # The regional signal check (routers/quality_regions.py); None: the global calibration.
    # ``reference_logits`` are then before it, and ``reference_region`` each prompt's region.
    regions: Regions | None = None
    reference_region: npt.NDArray[np.intp] | None = None

    def logits_of(self, rows: Sequence[int], vectors: Array, features: Array) -> Array:
        x = np.concatenate([vectors, features], axis=1).astype(np.float32)
        z = (x - self.mean) / self.scale
        picked = list(rows)
        logits: Array = (z @ self.coef[picked].T + self.intercept[picked]).astype(np.float32)
        if self.regions is not None:
            logits = self.regions.apply(logits, self.regions.assign(vectors), picked)
        return logits

    def reference_of(self, rows: Sequence[int]) -> Array:
        """The reference traffic's logits for the heads ``rows``."""
        logits: Array = self.reference_logits[:, list(rows)]
        if self.regions is not None and self.reference_region is not None:
            logits = self.regions.apply(logits, self.reference_region, rows)
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
                **_region_arrays(self.regions, self.reference_region),
            )

    @classmethod
    def load(cls, path: Path | None = None) -> QualityModel:
        path = path or SHIPPED_QUALITY
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                arrays = {k: np.asarray(data[k], dtype=np.float32) for k in _ARRAYS}
                models, ladder = tuple(meta["models"]), tuple(meta["ladder"])
                regions, reference_region = _load_regions(
                    data, len(models), arrays["mean"].shape[0], len(arrays["reference_chars"])
                )
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
            regions=regions,
            reference_region=reference_region,
            **arrays,
        )


def _region_arrays(regions: Regions | None, reference: Any) -> dict[str, Any]:
    if regions is None or reference is None:
        return {}
    return {
        "region_centroids": regions.centroids,
        "region_slope": regions.slope,
        "region_centre": regions.centre,
        "region_delta": regions.delta,
        "region_evidence": regions.evidence,
        "region_min_evidence": np.asarray([regions.min_evidence], dtype=np.float32),
        "reference_region": np.asarray(reference, dtype=np.int32),
    }


def _load_regions(
    data: Any, models: int, dim: int, prompts: int
) -> tuple[Regions | None, npt.NDArray[np.intp] | None]:
    present = [k for k in _REGIONS if k in data.files]
    if not present:
        return None, None
    if len(present) != len(_REGIONS):
        raise ValueError(f"region arrays incomplete: {present}")
    centroids, slope, centre, delta, evidence, floor = (
        np.asarray(data[k], dtype=np.float32) for k in _REGIONS[:-1]
    )
    reference = np.asarray(data["reference_region"], dtype=np.intp)
    k = len(slope)
    per_model = (k, models)
    if (
        centroids.shape[0] != k
        or centroids.shape[1] >= dim
        or not centre.shape == delta.shape == evidence.shape == per_model
        or reference.shape != (prompts,)
        or floor.shape != (1,)
        or (len(reference) and not 0 <= reference.min() <= reference.max() < k)
    ):
        raise ValueError("region arrays of inconsistent shapes")
    return Regions(centroids, slope, centre, delta, evidence, float(floor[0])), reference


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
        return self.model.reference_of(self.rows)

    def reference_traffic(self) -> tuple[Array, Array]:
        """The reference traffic: per-tier P(acceptable) and each prompt's characters."""
        return _sigmoid(self.reference_logits()), self.model.reference_chars


def _sigmoid(logits: Array) -> Array:
    out: Array = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return out
