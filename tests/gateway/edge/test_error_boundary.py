"""Never a text/plain 500, never a leak: every failure is OpenAI-shaped, on a real server.

Faults are injected into the running gateway's own parts (a key ring, a ledger, an
engine that raise what no code expects), and into a real upstream (401 and 400 bodies,
a dead port), and the answers are read with httpx and the official client.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.errors import scrub
from gateway.wire.errors import ErrorResponse
from tests.gateway.ledger_seed import ADMIN_KEY, admin_config
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway
from tiergate_testing.net import free_port
from tiergate_testing.upstream import running_upstream

SECRET = "secret-detail-10.9.8.7:6543"
CHAT = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}


def auth(key: str = TEST_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def assert_internal_error(response: httpx.Response) -> None:
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    body = ErrorResponse.model_validate(response.json())  # OpenAI's shape, nothing more
    assert body.error.code == "internal_error" and body.error.type == "server_error"
    request_id = response.headers["x-request-id"]
    assert request_id in body.error.message
    assert SECRET not in response.text and "Traceback" not in response.text


class BrokenKeys:
    """A key directory with a bug: it raises what no code expects."""

    async def authenticate(self, key: str) -> Any:
        raise RuntimeError(SECRET)


class BrokenLedger:
    async def daily(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError(SECRET)

    async def events(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError(SECRET)


class ExplodingWords:
    """Two words, then an error no engine adapter maps (a bug, not an EngineError)."""

    def __getitem__(self, _: slice) -> Iterator[str]:
        yield " one"
        yield " two"
        raise RuntimeError(SECRET)


def test_unexpected_errors_are_openai_shaped_500s_on_every_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with running_gateway(admin_config(fake_config())) as gateway:
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            keys = gateway.state.keys
            gateway.state.keys = BrokenKeys()  # type: ignore[assignment]
            for method, path in (
                ("POST", "/v1/chat/completions"),
                ("POST", "/v1/completions"),
                ("POST", "/v1/route"),
                ("GET", "/v1/models"),
            ):
                assert_internal_error(client.request(method, path, headers=auth(), json=CHAT))
            gateway.state.keys = keys
            gateway.swap(ledger=BrokenLedger())
            for path in ("/admin/api/overview", "/admin/api/denials", "/admin/api/budgets/spend"):
                assert_internal_error(client.get(path, headers=auth(ADMIN_KEY)))
            # The connection survived every 500: the next request on it is served.
            assert client.get("/healthz").status_code == 200
    # The detail is in the log, under the id the client saw.
    logged = [r for r in caplog.records if r.name == "gateway.edge.error_boundary"]
    assert len(logged) == 7 and all(r.exc_info and SECRET in str(r.exc_info[1]) for r in logged)


def test_an_unexpected_error_mid_stream_is_an_error_event_then_done() -> None:
    with running_gateway(fake_config()) as gateway:
        for replica in gateway.state.parts.replicas["fake-small"]:
            replica.engine.words = lambda request: ExplodingWords()  # type: ignore[attr-defined]
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            with client.stream(
                "POST", "/v1/chat/completions", headers=auth(), json={**CHAT, "stream": True}
            ) as response:
                assert response.status_code == 200
                lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        error = ErrorResponse.model_validate(orjson.loads(lines[-2][len("data: ") :]))
        assert error.error.code == "internal_error" and SECRET not in lines[-2]
        text = "".join(
            c["choices"][0]["delta"].get("content", "")
            for c in map(orjson.loads, (line[6:] for line in lines[:-2]))
        )
        assert text == " one two"
        pool = gateway.state.parts.pools["small"]
        assert gateway.call(_inflight(pool)) == 0  # the engine slot was given back


async def _inflight(pool: Any) -> int:
    return sum(r.inflight for r in pool.replicas)


def upstream_config(base_url: str, dead_url: str) -> dict[str, Any]:
    engines = {
        "unauthorized": {"api_base": base_url},
        "reject-me": {"api_base": base_url},
        "dead": {"api_base": dead_url, "connect_timeout_s": 2},
    }
    config = fake_config()
    config["engines"] = {
        name: {"backend": "openai", "model": name, "options": options}
        for name, options in engines.items()
    }
    config["tiers"] = {
        "small": {"engines": ["unauthorized"]},
        "medium": {"engines": ["reject-me"]},
        "large": {"engines": ["dead"]},
    }
    config["prices"] = {name: {"input": 1.0, "output": 1.0} for name in engines}
    return config


def test_upstream_error_text_never_reaches_the_client(caplog: pytest.LogCaptureFixture) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with running_upstream() as upstream:
        with running_gateway(upstream_config(upstream.base_url, dead)) as gateway:
            client = openai.OpenAI(
                base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0
            )
            answers: dict[str, openai.APIStatusError] = {}
            for model in ("unauthorized", "reject-me", "dead"):
                for stream in (False, True):
                    with pytest.raises(openai.APIStatusError) as caught:
                        client.chat.completions.create(
                            model=model,
                            messages=[{"role": "user", "content": "hi"}],
                            stream=stream,
                        )
                    answers[model] = caught.value
    assert answers["unauthorized"].status_code == 502
    assert answers["reject-me"].status_code == 400
    assert answers["dead"].status_code == 503
    for error in answers.values():
        text = error.response.text
        ErrorResponse.model_validate(error.response.json())
        for leak in ("sk-live", "10.0.0.7", "8443", "127.0.0.1", dead.split(":")[-1]):
            assert leak not in text, (leak, text)
    assert "bad model" in answers["reject-me"].message  # about the request: still said
    # What the upstream said is in the gateway's log for the operator.
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "sk-live-abcdef123456" in logged and "cannot connect to the upstream" in logged


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        ("Incorrect API key provided: sk-proj-abcdefgh1234", "Incorrect API key", "abcdefgh"),
        ("cannot connect to http://10.1.2.3:8000/v1/chat", "cannot connect", "10.1.2.3"),
        ("node engine-3.internal.svc:8000 refused", "refused", "engine-3"),
        ("max_tokens must be at most 4096", "at most 4096", "\0"),
    ],
)
def test_scrub_removes_hosts_and_keys(text: str, kept: str, gone: str) -> None:
    assert kept in scrub(text) and gone not in scrub(text)
    assert len(scrub("x" * 1000)) <= 303
