"""Redis 8: each tenant's vectors in one vector set, shared by every replica.

An element is the entry's digest; its attribute ``p`` is the entry's prefix, so
``VSIM … FILTER '.p == "<prefix>"'`` only ever returns entries whose conversation and
parameters match exactly. The vector set is written by the same Lua script as the
entry, so the two never disagree for long (TTL expiry is cleaned up on the next put).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from policies.stores.cache.keys import CacheKeys
from policies.stores.cache.redisbase import RedisStorageBase
from policies.stores.cache.storage import Candidate, Vector

# Nodes explored under a filter; the default (COUNT*100) is plenty when most of a
# tenant's entries share a prefix, and this bounds the work when few do.
FILTER_EF = 2000


class VectorSetStorage(RedisStorageBase):
    kind = "redis-vectorset"
    use_vector_set = True

    async def candidates(
        self, keys: CacheKeys, prefix: str, vector: Vector, count: int
    ) -> list[Candidate]:
        blob = vector.astype(np.float32).tobytes()

        async def run() -> Any:
            return await self.redis.execute_command(
                "VSIM",
                keys.vectors,
                "FP32",
                blob,
                "COUNT",
                count,
                "FILTER",
                f'.p == "{prefix}"',
                "FILTER-EF",
                FILTER_EF,
            )

        found = await self.call("vsim", run)
        digests = [d.decode() if isinstance(d, bytes) else str(d) for d in found or ()]
        return await self.fetch(keys, digests)
