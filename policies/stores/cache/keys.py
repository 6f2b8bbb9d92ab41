"""The shared store's key layout of one tenant's prompt cache: names, hash tags, namespaces.

The Redis key names live here, with the adapters that use them; what makes two requests
the same (the exact key, the semantic prefix) is ``gateway.cache.keys``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_NAMESPACE_OK = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def namespace(tenant: str) -> str:
    """The tenant's key namespace: its name when that is key-safe, else a digest of it."""
    if _NAMESPACE_OK.match(tenant):
        return tenant
    return "h" + hashlib.sha256(tenant.encode()).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class CacheKeys:
    """Redis key names for one tenant; the ``{namespace}`` hash tag keeps them in one
    cluster slot, so the Lua scripts may touch them together."""

    root: str  # CacheConfig.key_prefix
    ns: str
    space: str = ""  # the embedding space (``gateway.cache.keys.embedding_space``) of its vectors

    @property
    def base(self) -> str:
        return f"{self.root}:{{{self.ns}}}"

    def entry(self, digest: str) -> str:
        return f"{self.base}:e:{digest}"

    @property
    def order(self) -> str:
        """Sorted set: entry digest → time stored (ms); eviction order, count, flush."""
        return f"{self.base}:order"

    @property
    def vectors(self) -> str:
        """Redis 8 vector set of this tenant's semantic entries in this embedding space
        (a vector set holds one dimension; another embedder's vectors live in another)."""
        return f"{self.base}:vset:{self.space}" if self.space else f"{self.base}:vset"

    @property
    def stats(self) -> str:
        """Hash of this tenant's lookup figures, summed by every replica (cache/stats.py)."""
        return f"{self.base}:stats"

    @property
    def labels(self) -> str:
        """List of feedback labels (a served pair flagged wrong), newest first, capped."""
        return f"{self.base}:labels"


def stream_key(root: str) -> str:
    """Redis 7 path: every replica tails this stream to keep its index in sync."""
    return f"{root}:events"
