"""The embedder registry: the YAML name (``routing.classifier.embedder``) → its factory.

Factories import their model libraries only when called, so importing the gateway
needs neither torch nor onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from policies.routing_spec import ClassifierConfig
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


def _static(config: ClassifierConfig) -> SyncEmbedder:
    from routers.static_embedder import StaticEmbedder

    return StaticEmbedder(
        max_tokens=config.max_tokens, max_batch=config.max_batch, max_wait_ms=config.max_wait_ms
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
    "static": _static,
}
# The shipped complexity and quality models trained on an embedder's vectors, where they
# are not the default ones (``routers/model/*.npz``, trained on the ONNX MiniLM's).
SHIPPED_FOR: Mapping[str, Path] = {"static": Path(__file__).resolve().parent / "model" / "static"}


def shipped_model(config: ClassifierConfig, name: str) -> Path | None:
    """``name`` (``complexity.npz`` or ``quality.npz``) as shipped for the configured
    embedder; None: the default one."""
    folder = SHIPPED_FOR.get(config.embedder)
    return None if folder is None else folder / name


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
