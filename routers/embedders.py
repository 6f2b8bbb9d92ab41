"""The embedder registry: the YAML name (``routing.classifier.embedder``) → its factory.

Factories import their model libraries only when called, so importing the gateway
needs neither torch nor onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from policies.schema import ClassifierConfig
from routers.embedding import EmbedderUnavailable, SentenceTransformerEmbedder, SyncEmbedder


def _onnx(config: ClassifierConfig) -> SyncEmbedder:
    from routers.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder(
        max_tokens=config.max_tokens,
        quantize=config.quantize,
        threads=config.threads,
        max_batch=config.max_batch,
        max_wait_ms=config.max_wait_ms,
    )


def _sentence_transformers(config: ClassifierConfig) -> SyncEmbedder:
    return SentenceTransformerEmbedder(
        max_seq_length=config.max_tokens,
        max_batch=config.max_batch,
        max_wait_ms=config.max_wait_ms,
    )


EMBEDDERS: Mapping[str, Callable[[ClassifierConfig], SyncEmbedder]] = {
    "onnx": _onnx,
    "sentence-transformers": _sentence_transformers,
}


def build_embedder(config: ClassifierConfig) -> SyncEmbedder:
    """The configured embedder; heavy imports happen here, not at import time.

    Raises ``EmbedderUnavailable`` when its packages or model files are missing."""
    try:
        return EMBEDDERS[config.embedder](config)
    except (ImportError, OSError) as exc:
        raise EmbedderUnavailable(f"{config.embedder} embedder: {exc}") from exc


def build_sentence_embedder(model_path: str | None) -> SentenceTransformerEmbedder:
    """The semantic cache's sentence embedder (``cache.embedder_model``, or the shipped
    MiniLM); ``EmbedderUnavailable`` when its packages are not installed."""
    try:
        return SentenceTransformerEmbedder(model_path)
    except ImportError as exc:
        raise EmbedderUnavailable(f"sentence-transformers embedder: {exc}") from exc
