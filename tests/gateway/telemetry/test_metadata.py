"""``metadata`` on chat, completions and responses: accepted on every tier (agent
frameworks send it), bounded as OpenAI bounds it, recorded on the ledger event (real
Redis) and the trace, and sent to no engine unless ``store: true`` asks a remote one to
keep it. Through the official ``openai`` client against a real uvicorn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from policies.stores.ledger import TRUNCATED, SpendEvent
from tests.gateway.budget_support import BudgetProbe, budget_config, redis_prefix
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.upstream import UpstreamStats, running_upstream

TAGS = {"agent": "planner", "run_id": "r-42"}
HI = [{"role": "user", "content": "hi"}]


class Setup:
    def __init__(
        self,
        gateway: RunningGateway,
        probe: BudgetProbe,
        upstream: UpstreamStats,
        spans: InMemorySpanExporter,
    ) -> None:
        self.gateway, self.probe, self.upstream, self.spans = gateway, probe, upstream, spans
        self.client = openai.OpenAI(
            base_url=f"{gateway.base_url}/v1", api_key=TEST_KEY, max_retries=0
        )

    def event(self, request_id: str) -> SpendEvent:
        for _ in range(100):  # settlement runs just after the last byte
            found = [e for e in self.probe.events() if e.request_id == request_id]
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"no ledger event for {request_id}")

    def root(self, request_id: str) -> ReadableSpan:
        for _ in range(200):
            for span in self.spans.get_finished_spans():
                attributes = span.attributes or {}
                if span.kind == SpanKind.SERVER and attributes.get("gen_ai.response.id") == (
                    request_id
                ):
                    return span
            time.sleep(0.01)
        raise AssertionError(f"no root span for {request_id}")


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with redis_prefix() as prefix, running_upstream() as upstream:
        config = budget_config(prefix)
        # A remote tier: the fake stands for llama.cpp/vLLM (it refuses every field it
        # would have to forward), ``openai`` forwards to a server that keeps each body.
        config["engines"]["remote"] = {
            "backend": "openai",
            "model": "up-m",
            "options": {"api_base": upstream.base_url},
        }
        config["tiers"]["remote"] = {"engines": ["remote"]}
        config["prices"]["up-m"] = {"input": 1.0, "output": 1.0}
        with running_gateway(config, tracer_provider=provider) as gateway:
            yield Setup(gateway, BudgetProbe(prefix), upstream.stats, spans)


def test_chat_metadata_is_accepted_recorded_and_kept_from_a_local_engine(
    setup: Setup,
) -> None:
    raw = setup.client.chat.completions.with_raw_response.create(
        model="small", messages=HI, max_tokens=4, metadata=TAGS
    )
    reply = raw.parse()
    assert reply.choices[0].message.content  # the fake answered: it saw no metadata field
    assert raw.headers["x-tiergate-ignored"] == "metadata"
    event = setup.event(reply.id)
    assert event.metadata == TAGS and event.status == "ok" and event.cost_usd > 0
    attributes = setup.root(reply.id).attributes or {}
    assert attributes["tiergate.metadata.agent"] == "planner"
    assert attributes["tiergate.metadata.run_id"] == "r-42"
    assert tuple(attributes["tiergate.ignored"]) == ("metadata",)  # type: ignore[arg-type]


def test_streamed_chat_and_completions_record_it_too(setup: Setup) -> None:
    stream = setup.client.chat.completions.create(
        model="medium", messages=HI, max_tokens=3, metadata=TAGS, stream=True
    )
    ids = {chunk.id for chunk in stream}
    (streamed,) = ids
    assert setup.event(streamed).metadata == TAGS
    completion = setup.client.completions.create(
        model="small", prompt="a b c", max_tokens=2, extra_body={"metadata": {"job": "nightly"}}
    )
    assert setup.event(completion.id).metadata == {"job": "nightly"}


def test_a_request_without_metadata_records_none(setup: Setup) -> None:
    raw = setup.client.chat.completions.with_raw_response.create(
        model="small", messages=HI, max_tokens=2
    )
    assert "x-tiergate-ignored" not in raw.headers
    assert setup.event(raw.parse().id).metadata is None


def test_responses_metadata_reaches_the_ledger(setup: Setup) -> None:
    response = setup.client.responses.create(
        model="small", input="hi", max_output_tokens=4, metadata=TAGS, store=False
    )
    assert response.metadata == TAGS
    assert setup.event(response.id).metadata == TAGS


def test_a_remote_engine_gets_metadata_only_with_store(setup: Setup) -> None:
    bodies = setup.upstream.bodies
    before = len(bodies)
    raw = setup.client.chat.completions.with_raw_response.create(
        model="remote", messages=HI, max_tokens=4, metadata=TAGS
    )
    assert raw.headers["x-tiergate-ignored"] == "metadata"
    assert len(bodies) == before + 1 and "metadata" not in bodies[-1]
    raw = setup.client.chat.completions.with_raw_response.create(
        model="remote", messages=HI, max_tokens=4, metadata=TAGS, store=True
    )
    assert "x-tiergate-ignored" not in raw.headers
    assert bodies[-1]["metadata"] == TAGS and bodies[-1]["store"] is True
    assert setup.event(raw.parse().id).metadata == TAGS


def _tenant_spend(setup: Setup) -> list[str]:
    return sorted(e.request_id for e in setup.probe.events() if e.tenant == "acme")


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ({f"k{i}": "v" for i in range(17)}, "at most 16 key-value pairs"),
        ({"k" * 65: "v"}, "over 64 characters"),
        ({"k": "v" * 513}, "over 512 characters"),
        ({"k": 5}, "string"),
        (["k", "v"], "dictionary"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses"])
def test_metadata_past_openais_bounds_is_a_400_naming_it(
    setup: Setup, path: str, metadata: Any, says: str
) -> None:
    rest: dict[str, dict[str, Any]] = {
        "/v1/chat/completions": {"messages": HI, "max_tokens": 2},
        "/v1/completions": {"prompt": "hi", "max_tokens": 2},
        "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    }
    body = {"model": "small", "metadata": metadata, **rest[path]}
    before = _tenant_spend(setup)
    response = httpx.post(
        setup.gateway.base_url + path,
        json=body,
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"].startswith("metadata") and says in error["message"], error
    assert error["type"] == "invalid_request_error"
    assert _tenant_spend(setup) == before  # nothing charged, nothing recorded
    assert setup.probe.wait_no_holds() == 0


def test_sixteen_pairs_at_the_limits_are_accepted_and_the_ledger_keeps_what_fits(
    setup: Setup,
) -> None:
    full = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    reply = setup.client.chat.completions.create(
        model="small", messages=HI, max_tokens=2, metadata=full
    )
    kept = setup.event(reply.id).metadata
    assert kept is not None and len(orjson.dumps(kept)) <= 1024  # ledger.metadata_bytes
    note = kept[TRUNCATED]
    pairs = {k: v for k, v in kept.items() if k != TRUNCATED}
    assert pairs == {k: full[k] for k in list(full)[: len(pairs)]} and len(pairs) == 1
    assert note == "kept 1 of 16 pairs (1024 bytes)"


def test_the_ledger_keeps_metadata_through_the_settle_journal(setup: Setup) -> None:
    """The event's round trip through the fields every store writes (Redis stream, the
    settle journal): the same pairs back, and no field for a request without any."""
    event = SpendEvent(time.time(), "r1", "acme", "k1", "small", "m", metadata=TAGS)
    assert SpendEvent.from_fields(event.to_fields()) == event
    bare = SpendEvent(time.time(), "r2", "acme", "k1", "small", "m")
    assert "metadata" not in bare.to_fields()
    assert SpendEvent.from_fields(bare.to_fields()) == bare


def test_messages_metadata_user_id_reaches_the_ledger(setup: Setup) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=setup.gateway.base_url, api_key=TEST_KEY, max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="small",
        max_tokens=4,
        messages=[{"role": "user", "content": "hi"}],
        metadata={"user_id": "user-7"},
    )
    message = raw.parse()
    assert message.content
    assert setup.event(raw.headers["x-request-id"]).metadata == {"user_id": "user-7"}
