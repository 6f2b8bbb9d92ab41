"""HTTP hardening on a real uvicorn: slowloris, slow senders, readers that stop reading,
the admin-key guess throttle, the admin key's minimum length, and the /metrics token."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Any

import httpx
import orjson
import yaml

from gateway.throttle import GuessThrottle
from policies.service_spec import MetricsConfig
from policies.stores.budget import tenant_scope
from policies.stores.spending import tenant_scopes
from tests.gateway.ledger_seed import ADMIN_KEY
from tests.support import PYTHON, REPO
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway, subprocess_env

HALF_SENT = 300
CHAT = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}


def auth(key: str = TEST_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _half_sent(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    return sock


def _closed_by_server(sock: socket.socket, wait_s: float) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_slowloris_does_not_stop_other_clients_and_is_cut_off() -> None:
    config = fake_config()
    config["server"] = {"header_timeout_s": 1.5, "limit_concurrency": HALF_SENT + 50}
    with running_gateway(config) as gateway:
        attackers = [_half_sent(gateway.port) for _ in range(HALF_SENT)]
        try:
            with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
                started = time.monotonic()
                answers = [
                    client.post("/v1/chat/completions", headers=auth(), json=CHAT)
                    for _ in range(20)
                ]
                served_s = time.monotonic() - started
            assert [a.status_code for a in answers] == [200] * 20
            assert served_s < 5.0
            # Past header_timeout_s the server has closed every half-sent request.
            time.sleep(1.5)
            assert all(_closed_by_server(s, 3.0) for s in attackers)
        finally:
            for sock in attackers:
                sock.close()
        # With the half-sent connections gone, the concurrency limit is free again.
        assert httpx.get(gateway.base_url + "/healthz").status_code == 200


def test_a_body_that_arrives_too_slowly_is_408() -> None:
    config = fake_config()
    config["server"] = {"header_timeout_s": 1.0}
    with running_gateway(config) as gateway:
        with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + TEST_KEY.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"
            )
            sock.settimeout(5)
            head = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 408")
        assert b'"code":"request_timeout"' in head
        assert gateway.call(_held(gateway)) == 0


def _read_response(sock: socket.socket) -> bytes:
    """Head and body: the body may come in a later segment than the head."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        more = sock.recv(4096)
        if not more:
            break
        body += more
    return head + b"\r\n\r\n" + body


async def _inflight(gateway: Any) -> int:
    return sum(r.inflight for pool in gateway.state.parts.pools.values() for r in pool.replicas)


async def _held(gateway: Any) -> float:
    scopes = tenant_scopes(gateway.state.config, "acme")
    statuses = await gateway.state.parts.money.budgets.status(scopes)
    held: float = next(s.held_usd for s in statuses if s.scope == tenant_scope("acme"))
    return held


def _wait(gateway: Any, probe: Any, want: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    value = gateway.call(probe(gateway))
    while value != want and time.monotonic() < deadline:
        time.sleep(0.1)
        value = gateway.call(probe(gateway))
    return value


def test_a_reader_that_stops_reading_is_cut_off_and_frees_slot_and_hold() -> None:
    config = fake_config(tokens=60_000)
    config["server"] = {"write_timeout_s": 1.0}
    config["budgets"] = {"max_output_tokens": {"fake-small": 100_000}}
    config["tenants"]["acme"]["budget"] = {"limit_usd": 1000.0, "window": "daily"}
    body = orjson.dumps({**CHAT, "stream": True, "max_tokens": 60_000})
    with running_gateway(config) as gateway:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", gateway.port))
        try:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + TEST_KEY.encode() + b"\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            assert sock.recv(64).startswith(b"HTTP/1.1 200")  # then never read again
            assert _wait(gateway, _inflight, 1, 5) == 1
            assert gateway.call(_held(gateway)) > 0
            # Cut after one to two write timeouts; the slot and the hold are freed.
            assert _wait(gateway, _inflight, 0, 10) == 0
            assert _wait(gateway, _held, 0, 5) == 0
            engine = gateway.state.parts.replicas["fake-small"][0].engine
            assert engine.counters.aborted == 1
            assert engine.counters.generated_tokens < 60_000
        finally:
            sock.close()


def test_wrong_admin_keys_are_throttled_per_client() -> None:
    config = fake_config()
    config["admin"] = {"failures_per_minute": 3, "failures_per_minute_total": 100}
    os.environ["TIERGATE_ADMIN_KEY"] = ADMIN_KEY
    try:
        with running_gateway(config) as gateway:
            with httpx.Client(base_url=gateway.base_url) as client:
                wrong = [
                    client.get("/admin/api/budgets", headers=auth(f"guess-{i}-xxxxxxxxxxxx"))
                    for i in range(3)
                ]
                assert [r.status_code for r in wrong] == [403] * 3
                login = client.post("/admin/login", data={"key": "another-guess-xxxxxxxx"})
                assert login.status_code == 429 and login.json()["error"]["type"] == "requests"
                # While throttled, even the right key is refused: guessing cannot go on.
                right = client.get("/admin/api/budgets", headers=auth(ADMIN_KEY))
                assert right.status_code == 429 and int(right.headers["retry-after"]) >= 1
    finally:
        del os.environ["TIERGATE_ADMIN_KEY"]


def test_guess_throttle_counts_per_client_and_in_total() -> None:
    now = [0.0]
    throttle = GuessThrottle(per_client=2, total=3, window_s=60, clock=lambda: now[0])
    throttle.failed("a")
    throttle.failed("a")
    assert throttle.retry_after("a") == 60 and throttle.retry_after("b") is None
    throttle.failed("b")
    assert throttle.retry_after("c") == 60  # every client together
    now[0] = 61.0
    assert throttle.retry_after("a") is None  # a new minute


def test_a_short_admin_key_refuses_to_start(tmp_path: Any) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(fake_config()))
    env = subprocess_env(TIERGATE_ADMIN_KEY="short-key")
    done = subprocess.run(
        [PYTHON, "-m", "gateway", "serve", "--config", str(path), "--port", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "at least 16 are required" in done.stderr


def test_metrics_can_require_a_bearer_token() -> None:
    config = fake_config()
    config["metrics"] = {"token_from_env": "TIERGATE_TEST_METRICS_TOKEN"}
    os.environ["TIERGATE_TEST_METRICS_TOKEN"] = "scrape-token-0123456789"
    try:
        with running_gateway(config) as gateway:
            url = gateway.base_url + "/metrics"
            for headers in ({}, auth("wrong"), auth(TEST_KEY)):
                refused = httpx.get(url, headers=headers)
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "invalid_api_key"
            scraped = httpx.get(url, headers=auth("scrape-token-0123456789"))
            assert scraped.status_code == 200 and "tiergate_requests_total" in scraped.text
    finally:
        del os.environ["TIERGATE_TEST_METRICS_TOKEN"]


def test_metrics_have_no_tenant_label_by_default() -> None:
    assert MetricsConfig().tenant_label is False
    with running_gateway(fake_config()) as gateway:
        assert httpx.post(
            gateway.base_url + "/v1/chat/completions", headers=auth(), json=CHAT
        ).is_success
        text = httpx.get(gateway.base_url + "/metrics").text
        assert "tiergate_requests_total{" in text and 'tenant="' not in text
