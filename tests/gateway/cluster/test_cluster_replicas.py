"""Three real gateway processes on a real 3-master Redis Cluster (``redis_cluster: true``):
budgets, the ledger, the exact cache and admin sessions hold across replicas and slots."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from policies.schema import GatewayConfig
from policies.stores.spending import tenant_scopes
from tests.gateway.budget_support import ADMIN_KEY, BudgetProbe
from tests.gateway.money.test_budgets_replicas import KEYS, SMALL_COST, _fire, configure, replicas
from tests.redis_servers import RedisClusterProcess

pytestmark = pytest.mark.slow

REQUESTS = 150


def cluster_config(cluster: RedisClusterProcess) -> tuple[dict[str, Any], str]:
    prefix = f"tgcluster-{uuid.uuid4().hex[:8]}"
    raw, _ = configure(prefix, ttl_s=60, token_delay_s=0.02)
    raw["redis_url"] = cluster.url
    raw["redis_cluster"] = True
    # Three replicas and the load share two CPU cores here: the 0.1 s default is too tight.
    raw["cache"] = {"key_prefix": f"{prefix}:cache", "timeout_s": 2.0}
    raw["tenants"]["victim"]["cache"] = {"enabled": True}
    for name in ("spender", "paced"):
        raw["tenants"][name]["cache"] = {"enabled": False}
    return raw, prefix


def test_150_concurrent_requests_on_3_replicas_over_a_cluster(
    redis_cluster: RedisClusterProcess, tmp_path: Path
) -> None:
    raw, prefix = cluster_config(redis_cluster)
    config = GatewayConfig.model_validate(raw)
    probe = BudgetProbe(prefix, redis_cluster.url, cluster=True)
    with replicas(raw, 3, tmp_path) as running:
        urls = [r.base_url for r in running]
        started = time.monotonic()
        results = asyncio.run(_fire(urls, KEYS["spender"], REQUESTS))
        elapsed = time.monotonic() - started
        served = results.count("ok")
        refused = [r for r in results if r != "ok"]
        assert set(refused) <= {"429:insufficient_quota"}, sorted(set(refused))
        assert served == 50  # the budget buys exactly 50 requests
        assert probe.wait_no_holds() == 0
        status = probe.status(tenant_scopes(config, "spender"))["tenant:spender"]
        assert status.held_usd == 0.0
        assert status.spent_usd <= 50 * SMALL_COST + 1e-12
        requests = [e for e in probe.events() if e.tenant == "spender" and e.kind == "request"]
        assert len(requests) == served
        assert sum(e.cost_usd for e in requests) == pytest.approx(status.spent_usd, abs=1e-12)

        _exact_cache_is_shared(urls)
        _admin_session_is_shared(urls)
    print(f"\n{REQUESTS} requests on 3 replicas over a 3-master cluster in {elapsed:.2f}s: "
          f"{served} served, {len(refused)} refused, spent ${status.spent_usd:.9f} "
          f"of ${50 * SMALL_COST:.9f}, holds left 0")  # fmt: skip


def _exact_cache_is_shared(urls: list[str]) -> None:
    """An answer stored through one replica is an exact hit on the others."""
    headers = {"authorization": f"Bearer {KEYS['victim']}"}
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": f"cluster {uuid.uuid4().hex}"}],
        "max_tokens": 8,
        "temperature": 0,
    }
    first = httpx.post(urls[0] + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert first.status_code == 200 and first.headers["x-tiergate-cache"] == "miss"
    for url in urls[1:]:
        again = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert again.status_code == 200 and again.headers["x-tiergate-cache"] == "exact"
        assert again.json()["choices"] == first.json()["choices"]


def _admin_session_is_shared(urls: list[str]) -> None:
    """A dashboard session made on one replica works on another, and logging out ends it."""
    with httpx.Client(base_url=urls[0]) as first:
        login = first.post("/admin/login", data={"key": ADMIN_KEY})
        assert login.status_code == 303
        cookies = dict(first.cookies)
    assert cookies
    with httpx.Client(base_url=urls[2], cookies=cookies) as other:
        assert other.get("/admin/api/overview").status_code == 200
        assert other.post("/admin/logout").status_code == 303
    with httpx.Client(base_url=urls[1], cookies=cookies) as third:
        assert third.get("/admin/api/overview").status_code == 401
