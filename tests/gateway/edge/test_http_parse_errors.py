"""Every answer to a request the HTTP parser rejects is OpenAI's JSON, never uvicorn's
text/plain "Invalid HTTP request received.": raw sockets against a real ``tiergate
serve`` (httptools, what it runs with when installed) and against the same server on
h11 (uvicorn's other protocol). Nothing reaches an engine, and the server goes on."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol

from gateway.edge.server_protocol import BAD_REQUEST_CODE, gateway_protocol
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import GatewayProcess, running_gateway, subprocess_env

AUTH = b"Authorization: Bearer " + TEST_KEY.encode() + b"\r\n"
POST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + AUTH
CHAT = orjson.dumps({"model": "small", "messages": [{"role": "user", "content": "hi"}]})
LENGTH = b"Content-Length: %d\r\n" % len(CHAT)

MALFORMED = {
    "both lengths": POST + LENGTH + b"Transfer-Encoding: chunked\r\n\r\n" + CHAT,
    "two content lengths": POST + LENGTH + b"Content-Length: 3\r\n\r\n" + CHAT,
    "bad content length": POST + b"Content-Length: 12abc\r\n\r\n" + CHAT,
    "bad request line": b"THIS IS NOT HTTP\r\nHost: x\r\n\r\n",
    "bad version": b"GET /healthz HTTP/a.b\r\nHost: x\r\n\r\n",
    "space in a header name": POST + b"Bad Header: 1\r\n" + LENGTH + b"\r\n" + CHAT,
    "header without a colon": POST + b"NoColonHere\r\n" + LENGTH + b"\r\n" + CHAT,
    "NUL in a header": POST + b"X-Tag: a\x00b\r\n" + LENGTH + b"\r\n" + CHAT,
    "CR in a header": POST + b"X-Tag: a\rb\r\n" + LENGTH + b"\r\n" + CHAT,
    "bad chunk size": POST + b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n" + CHAT + b"\r\n0\r\n\r\n",
    "chunk longer than its size": POST
    + b"Transfer-Encoding: chunked\r\n\r\n2\r\n"
    + CHAT
    + b"\r\n0\r\n\r\n",
}


@pytest.fixture(scope="module", params=["tiergate serve", "h11"])
def server(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a gateway on the fake engines."""
    config = fake_config()
    if request.param == "tiergate serve":
        env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY)
        with GatewayProcess(config, tmp_path_factory.mktemp("parse"), env=env) as gateway:
            yield gateway.base_url
        return
    h11 = gateway_protocol(5.0, H11Protocol)
    with running_gateway(config, server_options={"http": h11}) as gateway:
        yield gateway.base_url


def _exchange(base_url: str, raw: bytes) -> tuple[bytes, dict[str, str], bytes, bool]:
    """Send ``raw``; the status line, headers, body, and whether the server then closed."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(raw)
        data = b""
        while True:
            try:
                more = sock.recv(65536)
            except ConnectionResetError:
                break
            if not more:
                break
            data += more
        closed = True  # recv returned b"" (or reset): the server closed the connection
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body, closed


def _requests_served(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tiergate_requests_total{")
    )


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_request_gets_a_json_400(server: str, case: str) -> None:
    before = _requests_served(server)
    status, headers, body, closed = _exchange(server, MALFORMED[case])
    assert status == b"HTTP/1.1 400 Bad Request", (status, body)
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    assert headers["connection"] == "close" and closed
    error = orjson.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == BAD_REQUEST_CODE
    assert error["message"].startswith("Invalid HTTP request: ")
    assert len(error["message"]) > len("Invalid HTTP request: ")  # the parser's reason
    assert _requests_served(server) == before  # no engine saw it, nothing was charged
    # The server goes on serving.
    answer = httpx.post(
        server + "/v1/chat/completions",
        content=CHAT,
        headers={"authorization": f"Bearer {TEST_KEY}", "content-type": "application/json"},
    )
    assert answer.status_code == 200


def test_a_well_formed_request_on_the_same_path_is_served(server: str) -> None:
    """The control: the framing above, well formed, is answered by the app."""
    status, _, body, _ = _exchange(server, POST + LENGTH + b"Connection: close\r\n\r\n" + CHAT)
    assert status == b"HTTP/1.1 200 OK", body
    assert orjson.loads(body)["object"] == "chat.completion"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)
    status, _, body, _ = _exchange(
        server, POST + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked
    )
    assert status == b"HTTP/1.1 200 OK", body


def test_past_the_concurrency_limit_the_503_is_json() -> None:
    config = fake_config()
    config["server"] = {"limit_concurrency": 4}
    with running_gateway(config) as gateway:
        idle = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(4)]
        try:
            status, headers, body, _ = _exchange(
                gateway.base_url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
        finally:
            for sock in idle:
                sock.close()
        assert status == b"HTTP/1.1 503 Service Unavailable", body
        assert headers["content-type"] == "application/json" and headers["retry-after"] == "1"
        assert orjson.loads(body)["error"]["code"] == "overloaded"
        for _ in range(50):  # the idle connections' closes reach the server
            if httpx.get(gateway.base_url + "/healthz").status_code == 200:
                break
            time.sleep(0.05)
        assert httpx.get(gateway.base_url + "/healthz").status_code == 200
