from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


import pytest

from tests.redis_servers import (
    RedisClusterProcess,
    RedisProcess,
    redis8_process,
    redis_cluster_process,
)


@pytest.fixture(scope="session")
def redis8() -> Iterator[RedisProcess]:
    """A Redis 8.2 (vector sets) for the whole session, on a free loopback port."""
    with redis8_process() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterProcess]:
    """A 3-master Redis Cluster (Redis 8) for the whole session, on free loopback ports."""
    with redis_cluster_process() as cluster:
        yield cluster


@pytest.fixture(scope="session", autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Settle journals (gateway/app.py) go under a temporary folder, never into $HOME."""
    os.environ.setdefault("TIERGATE_STATE_DIR", str(tmp_path_factory.mktemp("state")))
