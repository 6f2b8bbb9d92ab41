"""A gateway whose Redis is at ``maxmemory`` (``noeviction``) or read-only answers every
request with an OpenAI-shaped JSON error or a normal answer — never a text/plain 500, never
a reset connection — and its fail-open tenants are still served."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
import redis

from tests.gateway.budget_support import ADMIN_KEY
from tests.redis_servers import RedisProcess
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway


@pytest.fixture(scope="module", params=["oom", "readonly"])
def broken_redis(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "readonly":
        primary = RedisProcess()
        primary.start()
        replica = RedisProcess("--replicaof", "127.0.0.1", str(primary.port))
        replica.start()
        yield replica.url
        replica.stop()
        primary.stop()
        return
    server = RedisProcess("--maxmemory-policy", "noeviction")
    server.start()
    client = redis.Redis(port=server.port)
    for i in range(64):
        client.set(f"fill:{i}", b"x" * 65_536)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)
    client.close()
    yield server.url
    server.stop()


def test_no_500_when_redis_refuses_writes(
    broken_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERGATE_TEST_KEY", TEST_KEY)
    monkeypatch.setenv("TIERGATE_ADMIN_KEY", ADMIN_KEY)
    config = fake_config()
    config["redis_url"] = broken_redis
    config["admin"] = {"key_from_env": "TIERGATE_ADMIN_KEY"}
    config["tenants"]["acme"]["budget"] = {"limit_usd": 1.0}
    config["tenants"]["acme"]["cache"] = {"enabled": True}
    monkeypatch.setenv("TIERGATE_OTHER_KEY", OTHER_KEY)
    config["tenants"]["globex"]["budget_fail_open"] = True
    with running_gateway(config) as gateway:
        body = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
        refused = httpx.post(
            gateway.base_url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {TEST_KEY}"},
            timeout=30,
        )
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.json()["error"]["code"] == "budget_unavailable"

        served = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=OTHER_KEY, max_retries=0)
        answer = served.chat.completions.create(model="small", messages=body["messages"])  # type: ignore[arg-type]
        assert answer.choices[0].message.content
        served.close()

        login = httpx.post(gateway.base_url + "/admin/login", data={"key": ADMIN_KEY}, timeout=30)
        assert login.status_code == 503
        assert login.json()["error"]["type"]
