"""What one request may do with the prompt cache, decided before anything is looked up,
and what a lookup answers.

``CachePlan``: the request's keys, its tenant's policy, its fingerprint, and whether it
may look up, store and search the semantic index (``PromptCache.plan`` makes it from the
policy and the client's ``Cache-Control``: ``cache_directives``, ``cacheable``).
``Lookup``: the answer of a lookup (``gateway.cache.service``), an entry or a miss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from backends.base import GenerationRequest
from gateway.cache.keys import Fingerprint
from gateway.cache.record import CachedResponse
from policies.schema import CachePolicy
from policies.stores.cache.keys import CacheKeys

Admits = Callable[[CachedResponse], bool]  # whether the request may be answered by an entry
CacheStatus = Literal["exact", "semantic", "miss", "bypass"]


@dataclass(frozen=True, slots=True)
class CachePlan:
    keys: CacheKeys
    policy: CachePolicy
    fingerprint: Fingerprint
    lookup: bool
    store: bool
    semantic: bool
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class Lookup:
    status: CacheStatus
    response: CachedResponse | None = None
    similarity: float | None = None
    entry_id: str | None = None  # the stored entry a hit came from (``PromptCache.forget``)


def cache_directives(header: str | None) -> set[str]:
    if not header:
        return set()
    return {part.strip().split("=", 1)[0].lower() for part in header.split(",") if part.strip()}


def cacheable(policy: CachePolicy, request: GenerationRequest) -> bool:
    """Deterministic enough to replay: low temperature, or a fixed seed where allowed."""
    if request.logprobs:  # a stored answer keeps no log-probabilities to replay
        return False
    temperature = 1.0 if request.sampling.temperature is None else request.sampling.temperature
    if temperature <= policy.max_temperature:
        return True
    return policy.cache_seeded and request.sampling.seed is not None
