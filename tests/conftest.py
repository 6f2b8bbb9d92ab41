from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


import pytest

from tests.redis_servers import RedisProcess, redis8_process


@pytest.fixture(scope="session")
def redis8() -> Iterator[RedisProcess]:
    """A Redis 8.2 (vector sets) for the whole session, on a free loopback port."""
    with redis8_process() as server:
        yield server
