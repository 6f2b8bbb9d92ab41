"""The ``embeddings:`` section: which models ``POST /v1/embeddings`` serves, and how.

A model without ``engine`` is the in-process MiniLM the classifier already runs
(``routing.classifier``: one embedder, micro-batched, shared with the classifier and the
semantic cache). With ``engine``, the request goes to that engine's OpenAI-compatible
server (``openai`` or ``litellm`` backend). Prices are per input token, in ``prices``.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.engine_spec import EngineSpec, TierSpec
from policies.frozen import Frozen

# Backends whose engines can forward ``/v1/embeddings``.
EMBEDDING_BACKENDS = frozenset({"openai", "litellm"})


class EmbeddingSpec(Frozen):
    engine: str | None = None  # None: the in-process MiniLM (needs routing.classifier)


def embedding_problems(
    embeddings: Mapping[str, EmbeddingSpec],
    engines: Mapping[str, EngineSpec],
    tiers: Mapping[str, TierSpec],
    local_embedder: bool,
) -> list[str]:
    """What makes the section unservable; ``local_embedder``: routing.classifier is set."""
    problems: list[str] = []
    if embeddings and "embeddings" in tiers:  # the tier label embeddings requests carry
        problems.append("a tier may not be named 'embeddings' while embeddings are configured")
    in_tiers = {e for tier in tiers.values() for e in tier.engines}
    for model, spec in embeddings.items():
        where = f"embeddings.{model}"
        if spec.engine is None:
            if not local_embedder:
                problems.append(f"{where}: the in-process MiniLM needs routing.classifier")
            continue
        engine = engines.get(spec.engine)
        if engine is None:
            problems.append(f"{where} names unknown engine {spec.engine!r}")
        elif engine.backend not in EMBEDDING_BACKENDS:
            problems.append(
                f"{where}: engine {spec.engine!r} ({engine.backend}) cannot serve embeddings; "
                f"use one of {sorted(EMBEDDING_BACKENDS)}"
            )
        elif engine.model != model:
            problems.append(
                f"{where}: engine {spec.engine!r} serves {engine.model!r}, not {model!r}"
            )
        elif spec.engine in in_tiers:
            problems.append(f"{where}: engine {spec.engine!r} is in a tier (chat would reach it)")
    return problems
