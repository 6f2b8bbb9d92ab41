"""Build the embedder and classifier the config names (blocking: call it off the loop)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from policies.routing_spec import ClassifierConfig
from routers.classifier import ComplexityClassifier, ComplexityModel
from routers.embed_cache import CachedEmbedder
from routers.embed_worker import ProcessEmbedder
from routers.embedders import build_embedder, shipped_model
from routers.embedding import SyncEmbedder
from routers.quality import QualityModel, TierView

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoutingModels:
    embedder: SyncEmbedder
    classifier: ComplexityClassifier
    quality: TierView | None = None


def build_routing(
    config: ClassifierConfig,
    tiers: Sequence[str] = (),
    reference: Mapping[str, str] | None = None,
) -> RoutingModels:
    """Raises ``EmbedderUnavailable``, ``ModelFormatError`` or ``QualityFormatError``; the
    caller decides to go on. With ``tiers``, per-tier quality for them (``reference``:
    the quality model's head each tier stands for)."""
    model = ComplexityModel.load(
        Path(config.model) if config.model else shipped_model(config, "complexity.npz")
    )
    quality = tier_view(config, tiers, reference) if tiers else None
    embedder = serving_embedder(config)
    if model.embedder != embedder.name:
        log.warning(
            "the complexity model was trained on %s vectors, the embedder is %s: "
            "scores may drift; retrain with `tiergate train-classifier`",
            model.embedder,
            embedder.name,
        )
    return RoutingModels(embedder, ComplexityClassifier(model, quality), quality)


def tier_view(
    config: ClassifierConfig, tiers: Sequence[str], reference: Mapping[str, str] | None = None
) -> TierView:
    """The per-tier quality model (``classifier.quality``, else the shipped one) read for
    ``tiers``: what ``auto`` routes by and a feedback refit layers over."""
    return quality_model(config).for_tiers(tiers, reference)


def quality_model(config: ClassifierConfig) -> QualityModel:
    """``classifier.quality``, else the one shipped for the configured embedder."""
    return QualityModel.load(
        Path(config.quality) if config.quality else shipped_model(config, "quality.npz")
    )


def serving_embedder(config: ClassifierConfig) -> SyncEmbedder:
    """The configured embedder in ``workers`` processes (0: in this process), behind the
    LRU of repeated prompts' vectors (``embedding_cache`` 0: none)."""
    embedder: SyncEmbedder = (
        ProcessEmbedder(config) if config.workers > 0 else build_embedder(config)
    )
    if config.embedding_cache > 0:
        embedder = CachedEmbedder(embedder, config.embedding_cache)
    return embedder
