"""``/v1/responses`` with the official ``openai`` SDK, unchanged, against a real gateway on
the fake engines (the fake plays a tool-calling model): create, stream (the SDK's own
accumulator), a two-turn conversation through ``previous_response_id``, a function-tool
round trip, ``GET`` / ``DELETE`` / ``input_items``; stored responses per API key, in Redis
and in process; ``store: false``; the compatibility policy; an error mid-stream."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.gateway.budget_support import REDIS_URL, redis_prefix
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

SECOND_KEY = "tg-acme-second-key-000111"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather forecast for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
SCRIPT = [
    {"when": "weather", "call": "get_weather", "arguments": {"city": "Paris", "days": 3}},
    {"when": "helper", "call": "agents__spawn", "arguments": {"city": "Tokyo", "days": 1}},
]
ASK = "What is the weather in Paris for the next 3 days?"


def config_for(store: str, prefix: str) -> dict[str, Any]:
    config = fake_config(tools=True, tool_script=SCRIPT)
    config["tenants"]["acme"]["keys"].append({"id": "acme-2", "from_env": "TIERGATE_ACME_KEY_2"})
    config["tenants"]["strict"] = {
        "keys": [{"id": "strict-1", "from_env": "TIERGATE_STRICT_KEY"}],
        "compat": "strict",
    }
    if store == "redis":
        config["redis_url"], config["redis_prefix"] = REDIS_URL, prefix
    return config


@dataclass(frozen=True)
class Served:
    gateway: RunningGateway
    store: str  # memory | redis
    prefix: str  # its Redis keys' prefix


@pytest.fixture(scope="module", params=["memory", "redis"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    os.environ["TIERGATE_ACME_KEY_2"] = SECOND_KEY
    os.environ["TIERGATE_STRICT_KEY"] = "tg-strict-key-000222333"
    with redis_prefix() as prefix, running_gateway(config_for(request.param, prefix)) as running:
        yield Served(running, request.param, prefix)


@pytest.fixture
def gateway(served: Served) -> RunningGateway:
    return served.gateway


def client_for(gateway: RunningGateway, key: str = TEST_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)


@pytest.fixture
def client(gateway: RunningGateway) -> openai.OpenAI:
    return client_for(gateway)


def test_create_answers_with_a_response(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(
        model="small", input="Name three colours.", instructions="Answer briefly."
    )
    response = raw.parse()
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_") and raw.headers["x-request-id"] == response.id
    assert response.model == "fake-small" and raw.headers["x-tiergate-tier"] == "small"
    assert response.output_text.strip() and response.output[0].type == "message"
    assert response.usage is not None and response.usage.output_tokens == 8
    assert response.instructions == "Answer briefly." and "x-tiergate-ignored" not in raw.headers
    assert float(raw.headers["x-tiergate-cost-usd"]) > 0


def test_stream_is_the_event_sequence_the_sdk_accumulates(client: openai.OpenAI) -> None:
    with client.responses.stream(model="small", input="Stream a few words.") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas and len(deltas.split()) == 8
    assert final.usage is not None and final.usage.output_tokens == 8


def test_two_turns_through_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(model="small", input="My name is Ada.")
    second = client.responses.create(
        model="small", input="What is my name?", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id
    items = client.responses.input_items.list(second.id, order="asc").data
    # The continued conversation: the first question, its answer, then the new question.
    assert [(i.type, getattr(i, "role", None)) for i in items] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert items[1].content[0].text == first.output_text  # type: ignore[union-attr]
    # The engine saw the whole conversation: a different prompt than the question alone.
    alone = client.responses.create(model="small", input="What is my name?")
    assert alone.output_text != second.output_text


def test_a_function_tool_round_trip(client: openai.OpenAI) -> None:
    first = client.responses.create(model="small", input=ASK, tools=[WEATHER])
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3}
    assert call.call_id.startswith("call_") and call.status == "completed"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    second = client.responses.create(
        model="small", previous_response_id=first.id, input=[result], tools=[WEATHER]
    )
    assert second.output_text.strip() == "The tool returned: sunny, 21 C"
    # Without storage, the client sends the call back itself (as Codex does).
    again = client.responses.create(
        model="small",
        store=False,
        input=[{"role": "user", "content": ASK}, call.model_dump(exclude_none=True), result],
        tools=[WEATHER],
    )
    assert again.output_text == second.output_text


def test_a_streamed_function_call(client: openai.OpenAI) -> None:
    fresh = {"cache-control": "no-cache"}  # the engine streams; a replay sends calls whole
    with client.responses.stream(
        model="small", input=ASK, tools=[WEATHER], extra_headers=fresh
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[2] == "response.output_item.added"
    assert kinds.count("response.function_call_arguments.delta") >= 2
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    pieces = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    [call] = final.output
    assert call.type == "function_call" and call.arguments == pieces
    assert json.loads(pieces) == {"city": "Paris", "days": 3}


def test_get_delete_and_input_items(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model="small",
        input=[
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": [{"type": "input_text", "text": "Hi!"}]},
        ],
        metadata={"ticket": "T-1"},
    )
    fetched = client.responses.retrieve(created.id)
    assert fetched.id == created.id and fetched.output_text == created.output_text
    assert fetched.metadata == {"ticket": "T-1"}
    newest_first = client.responses.input_items.list(created.id)
    assert [i.role for i in newest_first.data] == ["user", "developer"]  # type: ignore[union-attr]
    page = client.responses.input_items.list(created.id, order="asc", limit=1)
    assert page.has_more and len(page.data) == 1
    rest = client.responses.input_items.list(created.id, order="asc", after=page.data[0].id)
    assert [i.role for i in rest.data] == ["user"] and not rest.has_more  # type: ignore[union-attr]
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_another_tenant_or_key_never_sees_a_response(gateway: RunningGateway) -> None:
    owner = client_for(gateway)
    created = owner.responses.create(model="small", input="A secret for acme-1.")
    for key in (OTHER_KEY, SECOND_KEY):  # tenant globex; acme's other key
        stranger = client_for(gateway, key)
        with pytest.raises(openai.NotFoundError):
            stranger.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            stranger.responses.input_items.list(created.id)
        with pytest.raises(openai.BadRequestError) as refused:
            stranger.responses.create(
                model="small", input="Continue.", previous_response_id=created.id
            )
        assert refused.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            stranger.responses.delete(created.id)
    assert owner.responses.retrieve(created.id).output_text == created.output_text


def stored_keys(prefix: str) -> int:
    """Response records under this prefix, counted in Redis itself."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = client.scan_iter(match=f"{prefix}:*responses:*")
        return sum(1 for key in keys if b":{quota:" not in key)  # the tenant's caps: apart
    finally:
        client.close()


def test_store_false_keeps_nothing(served: Served) -> None:
    gateway, on_redis = served.gateway, served.store == "redis"
    client = client_for(gateway, OTHER_KEY)
    before = stored_keys(served.prefix) if on_redis else 0
    unstored = client.responses.create(model="small", input="Forget this.", store=False)
    with client.responses.stream(model="small", input="And this.", store=False) as stream:
        streamed = stream.get_final_response()
    for response in (unstored, streamed):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response.id)
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="small", input="x", previous_response_id=response.id)
    if on_redis:
        assert stored_keys(served.prefix) == before
        kept = client.responses.create(model="small", input="Keep this.")
        assert stored_keys(served.prefix) == before + 1
        probe = redis.Redis.from_url(REDIS_URL)
        try:
            [key] = probe.scan_iter(match=f"{served.prefix}:*responses:{kept.id}")
            assert 0 < probe.pttl(key) <= 86_400_000  # responses.ttl_s, one day by default
        finally:
            probe.close()


def test_hints_are_named_and_hosted_tools_stripped(gateway: RunningGateway) -> None:
    answer = httpx.post(
        gateway.base_url + "/v1/responses",
        headers={"authorization": f"Bearer {TEST_KEY}"},
        json={
            "model": "small",
            "input": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"role": "user", "content": "Hello"},
            ],
            "tools": [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["v"]}],
            "tool_choice": "auto",
            "reasoning": {"effort": "high", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "session-1",
            "client_metadata": {"session_id": "s"},
            "service_tier": "auto",
            "store": False,
        },
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-tiergate-ignored"] == (
        "client_metadata, include, prompt_cache_key, reasoning, input[0], "
        "tools:web_search, tools:file_search"
    )
    body = answer.json()
    assert body["tools"] == [] and body["tool_choice"] == "auto"
    strict = httpx.post(
        gateway.base_url + "/v1/responses",
        headers={"authorization": "Bearer tg-strict-key-000222333"},
        json={"model": "small", "input": "Hello", "tools": [WEATHER, {"type": "web_search"}]},
    )
    assert strict.status_code == 400
    assert strict.json()["error"]["param"] == "tools[1]"
    assert strict.json()["error"]["code"] == "unsupported_tool"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"include": ["message.output_text.logprobs"]}, "include[0]"),
        ({"no_such_field": 1}, "no_such_field"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_it(
    gateway: RunningGateway, extra: dict[str, Any], param: str
) -> None:
    answer = httpx.post(
        gateway.base_url + "/v1/responses",
        headers={"authorization": f"Bearer {TEST_KEY}"},
        json={"model": "small", "input": "Hello", **extra},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_an_unknown_previous_response_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="small", input="Hi", previous_response_id="resp_" + "0" * 32)
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_namespace_tools_reach_the_engine_flattened(client: openai.OpenAI) -> None:
    namespace: Any = {
        "type": "namespace",
        "name": "agents",
        "description": "sub-agents",
        "tools": [{**WEATHER, "name": "spawn"}],
    }
    ask = "Start a helper for Tokyo."
    first = client.responses.create(model="small", input=ask, tools=[namespace], store=False)
    [call] = first.output
    # The engine was offered (and called) agents__spawn; the client sees its namespace.
    assert call.type == "function_call" and (call.namespace, call.name) == ("agents", "spawn")
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "started"}
    second = client.responses.create(
        model="small",
        input=[{"role": "user", "content": ask}, call.model_dump(exclude_none=True), result],
        tools=[namespace],
        store=False,
    )
    assert second.output_text.strip() == "The tool returned: started"


def test_chat_and_responses_share_the_exact_cache_and_the_price(client: openai.OpenAI) -> None:
    # Unique per run: the cache's Redis keys outlive the test (cache.key_prefix).
    question = [{"role": "user", "content": f"One question on two endpoints ({uuid.uuid4()})."}]
    chat = client.chat.completions.with_raw_response.create(
        model="small",
        messages=question,
        temperature=0,  # type: ignore[arg-type]
    )
    responses = client.responses.with_raw_response.create(
        model="small",
        input=question,
        temperature=0,  # type: ignore[arg-type]
    )
    assert chat.headers["x-tiergate-cache"] == "miss"
    assert responses.headers["x-tiergate-cache"] == "exact"
    assert responses.headers["x-tiergate-tier"] == chat.headers["x-tiergate-tier"]
    assert responses.parse().output_text == chat.parse().choices[0].message.content


def test_an_error_mid_stream_is_an_error_event_and_response_failed() -> None:
    with running_gateway(fake_config(fail_after_tokens=2)) as failing:
        client = client_for(failing)
        fresh = {"cache-control": "no-cache"}
        with client.responses.stream(model="small", input="Fail", extra_headers=fresh) as stream:
            events = list(stream)
            with pytest.raises(RuntimeError, match=r"response\.completed"):
                stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds.count("response.output_text.delta") == 2
    assert kinds[-2:] == ["error", "response.failed"]
    error, failed = events[-2], events[-1]
    assert error.code == "upstream_error" and error.message  # type: ignore[union-attr]
    assert failed.response.status == "failed"  # type: ignore[union-attr]
    assert failed.response.error is not None  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_what_was_ignored_is_on_the_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with running_gateway(fake_config(), tracer_provider=provider) as traced:
        client_for(traced).responses.create(
            model="small", input="Hi", prompt_cache_key="k", tools=[{"type": "web_search"}]
        )
        for _ in range(200):  # the root span ends once the answer is written
            roots = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
            if roots:
                break
            time.sleep(0.01)
    [root] = roots
    assert root.attributes is not None
    assert root.attributes["tiergate.ignored"] == ("prompt_cache_key", "tools:web_search")
    assert root.attributes["tiergate.tier"] == "small"


def test_the_size_cap_and_the_memory_budget() -> None:
    config = fake_config()
    config["responses"] = {"max_bytes": 4096}
    with running_gateway(config) as small:
        client = client_for(small)
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="small", input="x" * 5000)
        assert refused.value.body["param"] == "store"  # type: ignore[index]
        # An output that pushes the record over the cap: answered, not kept, said so.
        near = client.responses.create(model="small", input="y" * 3500)
        assert near.model_extra is not None and near.model_extra["store"] is False
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(near.id)
        # In process, records share 16 x max_bytes: the oldest go first.
        kept = [client.responses.create(model="small", input=f"note {i}").id for i in range(100)]
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(kept[0])
        assert client.responses.retrieve(kept[-1]).id == kept[-1]


def test_responses_are_charged_as_chat(client: openai.OpenAI) -> None:
    fresh = {"cache-control": "no-cache, no-store"}
    question = [{"role": "user", "content": "Price me twice."}]
    chat = client.chat.completions.with_raw_response.create(
        model="medium",
        messages=question,
        extra_headers=fresh,  # type: ignore[arg-type]
    )
    responses = client.responses.with_raw_response.create(
        model="medium",
        input=question,
        extra_headers=fresh,
        store=False,  # type: ignore[arg-type]
    )
    assert responses.headers["x-tiergate-cache"] == chat.headers["x-tiergate-cache"] == "bypass"
    assert responses.headers["x-tiergate-tier"] == chat.headers["x-tiergate-tier"] == "medium"
    assert float(responses.headers["x-tiergate-cost-usd"]) == pytest.approx(
        float(chat.headers["x-tiergate-cost-usd"])
    )
    assert float(chat.headers["x-tiergate-cost-usd"]) > 0
