"""``POST /v1/embeddings`` against a real gateway (uvicorn on loopback), with the official
``openai`` SDK and LangChain: the classifier's MiniLM in process, and a remote model on
the ``openai`` backend forwarding to a real OpenAI-compatible server on loopback.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.wire.fields import EMBEDDING_FIELDS
from policies.schema import GatewayConfig
from routers.wordpiece import WordPieces
from tests.support import PYTHON, REPO
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway, subprocess_env
from tiergate_testing.net import free_port, wait_http
from tiergate_testing.upstream import Upstream, running_upstream

MINILM = "all-minilm-l6-v2"
REMOTE = "text-embedding-3-small"
PACED_KEY = "tg-paced-key-0123456789"
PRICE = 1000.0  # USD per million input tokens: a few tokens cost a visible amount
BUDGET = 0.02  # globex's daily budget: about five short requests


def embeddings_config(upstream: str) -> dict[str, Any]:
    config = fake_config()
    config["routing"] = {"classifier": {"max_wait_ms": 1}}
    config["engines"]["remote-embed"] = {
        "backend": "openai",
        "model": REMOTE,
        "options": {"api_base": upstream, "upstream_model": "upstream-embed"},
    }
    config["embeddings"] = {MINILM: {}, REMOTE: {"engine": "remote-embed"}}
    config["prices"][MINILM] = {"input": PRICE, "output": 0}
    config["prices"][REMOTE] = {"input": 20.0, "output": 0}
    config["engines"]["rejecting-embed"] = {
        "backend": "openai",
        "model": "rejected-embed",
        "options": {"api_base": upstream, "upstream_model": "reject-me"},
    }
    config["embeddings"]["rejected-embed"] = {"engine": "rejecting-embed"}
    config["prices"]["rejected-embed"] = {"input": 20.0, "output": 0}
    config["tenants"]["globex"]["budget"] = {"limit_usd": BUDGET, "window": "daily"}
    digest = hashlib.sha256(PACED_KEY.encode()).hexdigest()
    config["tenants"]["paced"] = {
        "keys": [{"id": "paced-1", "sha256": digest}],
        "rate_limit": {"requests_per_minute": 2},
    }
    return config


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as running:
        yield running


EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def gateway(upstream: Upstream) -> Iterator[RunningGateway]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    with running_gateway(embeddings_config(upstream.base_url), tracer_provider=provider) as running:
        yield running


def client(gateway: RunningGateway, key: str = TEST_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)


def post(gateway: RunningGateway, body: Any, key: str = TEST_KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(gateway.base_url + "/v1/embeddings", json=body, headers=headers, timeout=30)


def ledger(gateway: RunningGateway) -> list[Any]:
    events = gateway.call(gateway.state.parts.money.ledger.events(0, time.time() + 60))
    return list(events)


def test_sdk_three_inputs_three_vectors(gateway: RunningGateway) -> None:
    texts = ["The cat sat on the mat.", "Budgets are reserved first.", "x"]
    sdk = client(gateway)
    answer = sdk.embeddings.create(model=MINILM, input=texts, encoding_format="float")
    assert [d.index for d in answer.data] == [0, 1, 2]
    assert {len(d.embedding) for d in answer.data} == {384}
    assert answer.usage.prompt_tokens > 0 and answer.usage.total_tokens > 0
    assert answer.model == MINILM
    # The SDK's default asks for base64 and decodes it: the same float32 vectors, bit for
    # bit (JSON floats are float32's shortest repr, which reads back to the same float32).
    floats = np.array([d.embedding for d in answer.data], "<f4")
    default = sdk.embeddings.create(model=MINILM, input=texts)
    assert np.array_equal(np.array([d.embedding for d in default.data], "<f4"), floats)
    raw = post(gateway, {"model": MINILM, "input": texts, "encoding_format": "base64"}).json()
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in raw["data"]]
    assert np.array_equal(np.stack(decoded), floats)
    # What the classifier's own embedder gives for these texts (the shared instance).
    served = gateway.state.parts.served_embedder
    assert served is not None and served.embedder is gateway.state.parts.router.embedder
    direct = gateway.call(served.embedder.embed(texts))
    assert np.allclose(np.stack(decoded), direct, atol=1e-6)
    # usage: MiniLM's wordpieces, [CLS] and [SEP] included
    assert answer.usage.prompt_tokens == sum(WordPieces().count_sync(texts))
    norms = np.linalg.norm(np.stack(decoded), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-4)
    assert not np.allclose(decoded[0], decoded[1])


def test_token_arrays_are_minilm_wordpiece_ids(gateway: RunningGateway) -> None:
    tokenizer = WordPieces()._tokenizer
    texts = ["tokenization is fun", "hello world"]
    ids = [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    by_text = client(gateway).embeddings.create(model=MINILM, input=texts)
    by_ids = client(gateway).embeddings.create(model=MINILM, input=ids)
    one = client(gateway).embeddings.create(model=MINILM, input=ids[0])
    assert np.allclose(
        [d.embedding for d in by_ids.data], [d.embedding for d in by_text.data], atol=1e-6
    )
    assert np.allclose(one.data[0].embedding, by_text.data[0].embedding, atol=1e-6)
    assert by_ids.usage.prompt_tokens == by_text.usage.prompt_tokens


LONG = "word " * 200  # over the embedder's 128-wordpiece window (routing.classifier.max_tokens)
ERRORS: list[tuple[dict[str, Any], int, str | None]] = [
    ({"model": MINILM, "input": ""}, 400, "input"),
    ({"model": MINILM, "input": []}, 400, "input"),
    ({"model": MINILM, "input": ["ok", ""]}, 400, "input"),
    ({"model": MINILM, "input": [[]]}, 400, "input"),
    ({"model": MINILM, "input": 5}, 400, "input"),
    ({"model": MINILM, "input": ["a", 1]}, 400, "input"),
    ({"model": MINILM, "input": [1, -2]}, 400, "input"),
    ({"model": MINILM, "input": [True]}, 400, "input"),
    ({"model": MINILM, "input": [[1, 2], "a"]}, 400, "input"),
    ({"model": MINILM, "input": {"text": "a"}}, 400, "input"),
    ({"model": MINILM, "input": [99999]}, 400, "input"),
    ({"model": MINILM, "input": LONG}, 400, "input"),
    ({"model": MINILM}, 400, "input"),
    ({"input": "a"}, 400, "model"),
    ({"model": MINILM, "input": "a", "dimensions": 64}, 400, "dimensions"),
    ({"model": MINILM, "input": "a", "dimensions": 0}, 400, "dimensions"),
    ({"model": MINILM, "input": "a", "encoding_format": "int8"}, 400, "encoding_format"),
    ({"model": MINILM, "input": "a", "truncate": "END"}, 400, "truncate"),
    ({"model": "no-such-embedder", "input": "a"}, 404, "model"),
    ({"model": "fake-small", "input": "a"}, 404, "model"),  # a chat model
    ({"model": "auto", "input": "a"}, 404, "model"),
]


FIELD_SAMPLES: dict[str, dict[str, Any]] = {
    "model": {},
    "input": {"input": ["a", "b"]},
    "encoding_format": {"encoding_format": "base64"},
    "user": {"user": "end-user-1"},
    "dimensions": {"dimensions": 4},
    "unlisted": {"truncate": "END"},  # stands for any field the gateway does not model
}


@pytest.mark.parametrize("field", [*EMBEDDING_FIELDS, "unlisted"])
def test_every_field_is_honoured_or_a_400_naming_it(
    gateway: RunningGateway, upstream: Upstream, field: str
) -> None:
    sample = FIELD_SAMPLES[field]
    kind = EMBEDDING_FIELDS.get(field, "passthrough")
    local = post(gateway, {"model": MINILM, "input": "a", **sample})
    if kind == "passthrough":
        assert local.status_code == 400 and local.json()["error"]["param"] == next(iter(sample))
    else:
        assert local.status_code == 200, local.text
    remote = post(gateway, {"model": REMOTE, "input": "a", **sample})
    assert remote.status_code == 200, remote.text
    forwarded = upstream.stats.bodies[-1]
    assert all(forwarded[k] == v for k, v in sample.items()), (sample, forwarded)


def test_bad_requests_get_openai_errors_and_change_nothing(gateway: RunningGateway) -> None:
    before, spent = len(ledger(gateway)), gateway.state.parts.metrics.cost.collect()
    for body, status, param in ERRORS:
        answer = post(gateway, body)
        assert answer.status_code == status, (body, answer.text)
        error = answer.json()["error"]
        assert error["param"] == param, (body, error)
        assert error["type"] == "invalid_request_error" and error["message"]
    long = post(gateway, {"model": MINILM, "input": LONG}).json()["error"]
    assert long["code"] == "context_length_exceeded" and "128" in long["message"]
    assert len(ledger(gateway)) == before  # no budget charged, no event written
    assert gateway.state.parts.metrics.cost.collect() == spent
    assert post(gateway, {"model": MINILM, "input": "a"}, key="wrong").status_code == 401
    accepted = post(gateway, {"model": MINILM, "input": "a", "user": "end-user-7"})
    assert accepted.status_code == 200


def test_budget_reservation_ledger_and_429_like_chat(gateway: RunningGateway) -> None:
    sdk = client(gateway, OTHER_KEY)
    charged = 0.0
    with pytest.raises(openai.RateLimitError) as refused:
        for _ in range(50):
            answer = sdk.embeddings.with_raw_response.create(model=MINILM, input="hello world")
            tokens = answer.parse().usage.prompt_tokens
            assert float(answer.headers["x-tiergate-cost-usd"]) == pytest.approx(
                tokens * PRICE / 1e6
            )
            charged += tokens * PRICE / 1e6
    assert refused.value.code == "insufficient_quota"
    assert BUDGET - 4 * PRICE / 1e6 < charged <= BUDGET + 1e-12  # never over the budget
    events = [e for e in ledger(gateway) if e.tenant == "globex"]
    served = [e for e in events if e.kind == "request"]
    assert {e.model for e in served} == {MINILM} and {e.tier for e in served} == {"embeddings"}
    assert all(e.prompt_tokens == 4 and e.completion_tokens == 0 for e in served)
    assert sum(e.cost_usd for e in served) == pytest.approx(charged)
    assert [e.status for e in events if e.kind == "denied"] == ["budget"]
    # A chat request of the same tenant is refused in the same shape.
    chat = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {OTHER_KEY}"},
    )
    embed = post(gateway, {"model": MINILM, "input": "hello world"}, key=OTHER_KEY)
    assert chat.status_code == embed.status_code == 429
    assert chat.json()["error"].keys() == embed.json()["error"].keys()
    assert chat.json()["error"]["code"] == embed.json()["error"]["code"]
    metrics = httpx.get(gateway.base_url + "/metrics").text
    assert 'endpoint="embeddings"' in metrics and 'tier="embeddings"' in metrics


def test_rate_limit_applies_as_for_chat(gateway: RunningGateway) -> None:
    answers = [post(gateway, {"model": MINILM, "input": "a"}, key=PACED_KEY) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    error = answers[2].json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "x-ratelimit-remaining-requests" in {h.lower() for h in answers[0].headers}
    events = [e for e in ledger(gateway) if e.tenant == "paced"]
    assert [(e.kind, e.status) for e in events] == [
        ("request", "ok"),
        ("request", "ok"),
        ("denied", "rate_limit"),
    ]


def test_upstream_refusal_is_an_openai_error_and_charges_nothing(
    gateway: RunningGateway,
) -> None:
    answer = post(gateway, {"model": "rejected-embed", "input": "a"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error"
    event = ledger(gateway)[-1]
    assert event.model == "rejected-embed" and event.status == "error"
    assert event.cost_usd == 0.0 and event.prompt_tokens == 0


# Input shapes around the valid ones: every answer is a 200 or a 400 naming ``input``.
_ids = st.lists(st.integers(min_value=-2, max_value=40_000), max_size=6)
_texts = st.lists(st.text(max_size=12), max_size=4)
_inputs = st.one_of(
    st.text(max_size=20),
    _texts,
    _ids,
    st.lists(_ids, max_size=3),
    st.lists(st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none()), max_size=3),
)


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(value=_inputs)
def test_any_input_shape_is_a_200_or_a_400_naming_input(
    gateway: RunningGateway, value: Any
) -> None:
    answer = post(gateway, {"model": MINILM, "input": value, "encoding_format": "base64"})
    assert answer.status_code in (200, 400), (value, answer.text)
    if answer.status_code == 400:
        assert answer.json()["error"]["param"] == "input", (value, answer.text)
        return
    body = answer.json()
    count = 1 if isinstance(value, str) or isinstance(value[0], int) else len(value)
    assert len(body["data"]) == count and body["usage"]["prompt_tokens"] >= 2 * count
    assert all(len(base64.b64decode(d["embedding"])) == 4 * 384 for d in body["data"])


def test_one_trace_per_request_named_as_genai_embeddings(gateway: RunningGateway) -> None:
    EXPORTER.clear()
    answer = post(gateway, {"model": MINILM, "input": ["a b", "c"]})
    rid = answer.headers["x-request-id"]
    for _ in range(200):
        roots = [s for s in EXPORTER.get_finished_spans() if s.kind == SpanKind.SERVER]
        if roots:
            break
        time.sleep(0.01)
    (root,) = roots
    assert root.name == f"embeddings {MINILM}"
    attributes = dict(root.attributes or {})
    assert attributes["gen_ai.operation.name"] == "embeddings"
    assert attributes["gen_ai.response.id"] == rid
    assert attributes["gen_ai.usage.input_tokens"] == answer.json()["usage"]["prompt_tokens"]
    assert attributes["tiergate.status"] == "ok"


def test_models_lists_the_embedding_models(gateway: RunningGateway) -> None:
    listed = {m.id: m for m in client(gateway).models.list().data}
    assert listed[MINILM].owned_by == "tiergate"
    assert listed[MINILM].model_extra["tiergate"] == {"kind": "embedding", "engine": "in-process"}
    assert listed[REMOTE].model_extra["tiergate"]["kind"] == "embedding"


def test_remote_model_on_the_openai_backend(gateway: RunningGateway, upstream: Upstream) -> None:
    log = upstream.stats
    sdk = client(gateway)
    answer = sdk.embeddings.create(model=REMOTE, input=["one two", "three"], dimensions=4)
    forwarded = log.bodies[-1]
    assert forwarded["model"] == "upstream-embed" and forwarded["dimensions"] == 4
    assert forwarded["input"] == ["one two", "three"]
    assert [len(d.embedding) for d in answer.data] == [4, 4]
    assert answer.model == REMOTE and answer.usage.prompt_tokens == 3  # the upstream's count
    floats = sdk.embeddings.create(
        model=REMOTE, input=["one two", "three"], dimensions=4, encoding_format="float"
    )
    assert np.allclose([d.embedding for d in floats.data], [d.embedding for d in answer.data])
    extra = post(gateway, {"model": REMOTE, "input": [[5, 6, 7]], "truncate": "END"})
    assert extra.status_code == 200 and log.bodies[-1]["truncate"] == "END"
    event = ledger(gateway)[-1]
    assert event.model == REMOTE and event.prompt_tokens == 3
    assert event.cost_usd == pytest.approx(3 * 20.0 / 1e6)


def test_langchain_openai_embeddings(gateway: RunningGateway) -> None:
    from langchain_openai import OpenAIEmbeddings

    from routers.embedding import minilm_path

    common = {"model": MINILM, "base_url": gateway.base_url + "/v1", "api_key": TEST_KEY}
    plain = OpenAIEmbeddings(check_embedding_ctx_length=False, **common)  # type: ignore[arg-type]
    docs = ["Embeddings feed retrieval.", "A second document."]
    vectors = plain.embed_documents(docs)
    assert len(vectors) == 2 and {len(v) for v in vectors} == {384}
    assert len(plain.embed_query("a query")) == 384
    # Chunked by MiniLM's own tokenizer (LangChain's non-tiktoken path), under its window.
    chunked = OpenAIEmbeddings(
        tiktoken_enabled=False,
        tiktoken_model_name=minilm_path(),
        embedding_ctx_length=100,
        **common,  # type: ignore[arg-type]
    )
    again = chunked.embed_documents(docs)
    assert np.allclose(again, vectors, atol=1e-3)


def test_config_checks() -> None:
    config = embeddings_config("http://127.0.0.1:9/v1")
    GatewayConfig.model_validate(config)
    no_classifier = {**config, "routing": {}}
    with pytest.raises(ValueError, match=r"needs routing\.classifier"):
        GatewayConfig.model_validate(no_classifier)
    in_tier = {**config, "tiers": {**config["tiers"], "small": {"engines": ["remote-embed"]}}}
    with pytest.raises(ValueError, match="is in a tier"):
        GatewayConfig.model_validate(in_tier)
    chat_engine = {**config, "embeddings": {"fake-small": {"engine": "fake-small"}}}
    with pytest.raises(ValueError, match="cannot serve embeddings"):
        GatewayConfig.model_validate(chat_engine)
    unpriced = {**config, "prices": {k: v for k, v in config["prices"].items() if k != MINILM}}
    with pytest.raises(ValueError, match="no entry in prices"):
        GatewayConfig.model_validate(unpriced)


@pytest.mark.slow
def test_tiergate_serve_on_the_shipped_config_serves_minilm() -> None:
    """The README's embedded default (config/gateway.yaml) under ``tiergate serve``."""
    port = free_port()
    env = subprocess_env(TIERGATE_DEMO_KEY=TEST_KEY, TIERGATE_LOG_LEVEL="warning")
    command = [PYTHON, "-m", "gateway", "serve", "--config", "config/gateway.yaml"]
    proc = subprocess.Popen([*command, "--port", str(port)], cwd=REPO, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/readyz", timeout_s=120)
        sdk = openai.OpenAI(base_url=url + "/v1", api_key=TEST_KEY, max_retries=0)
        answer = sdk.embeddings.create(model=MINILM, input=["red", "green", "blue sky"])
        assert len(answer.data) == 3 and {len(d.embedding) for d in answer.data} == {384}
        assert answer.usage.prompt_tokens == 3 + 3 + 4
        assert MINILM in {m.id for m in sdk.models.list().data}
    finally:
        proc.terminate()
        proc.wait(30)


def test_without_the_classifiers_embedder_the_local_model_is_404(tmp_path: Any) -> None:
    broken = tmp_path / "classifier.npz"
    broken.write_bytes(b"not a model")
    config = embeddings_config("http://127.0.0.1:9/v1")
    config["routing"] = {"classifier": {"model": str(broken)}}
    with running_gateway(config) as gateway:
        assert gateway.state.parts.served_embedder is None
        assert any("embedding model is off" in note for note in gateway.state.notes)
        answer = post(gateway, {"model": MINILM, "input": "a"})
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "model_not_found"
        assert ledger(gateway) == []  # nothing admitted, nothing charged


def test_minilm_is_served_under_its_name_when_routing_runs_static(
    gateway: RunningGateway, upstream: Upstream
) -> None:
    """Routing on the static embedder (other vectors, 256 wide) leaves ``/v1/embeddings``
    serving MiniLM: the same vectors as the MiniLM gateway's, from its own instance."""
    config = embeddings_config(upstream.base_url)
    config["routing"]["classifier"]["embedder"] = "static"
    texts = ["The cat sat on the mat.", "Budgets are reserved first."]
    expected = client(gateway).embeddings.create(model=MINILM, input=texts)
    with running_gateway(config) as static:
        parts = static.state.parts
        assert parts.router.embedder is not None
        assert parts.router.embedder.name.startswith("static-")
        answer = client(static).embeddings.create(model=MINILM, input=texts)
        assert answer.model == MINILM
        assert {len(d.embedding) for d in answer.data} == {384}
        got = np.array([d.embedding for d in answer.data])
        assert np.allclose(got, [d.embedding for d in expected.data], atol=1e-5)
