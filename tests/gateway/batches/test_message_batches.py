"""Anthropic's Message Batches API with the official ``anthropic`` SDK, unchanged, against
a real gateway on the in-process store (the memory implementation end to end): create,
retrieve until ended, results, cancel, list, delete, and Anthropic's error shapes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.gateway.batches.support import batch_config
from tiergate_testing.configs import OTHER_KEY, TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    config = batch_config(token_delay_s=0.004)
    config["batches"]["concurrency"] = 4
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    with running_gateway(config, tracer_provider=provider) as running:
        yield running


def client_for(gateway: RunningGateway, key: str = TEST_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base_url, api_key=key, max_retries=0)


def requests(count: int, prefix: str = "m") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"{prefix}-{i}",
            "params": {
                "model": "small",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"hello {i}"}],
            },
        }
        for i in range(count)
    ]


def wait_ended(client: anthropic.Anthropic, batch_id: str) -> Any:
    deadline = time.monotonic() + 60
    while (batch := client.messages.batches.retrieve(batch_id)).processing_status != "ended":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return batch


def test_a_message_batch_runs_and_its_results_stream(gateway: RunningGateway) -> None:
    client = client_for(gateway)
    asked = requests(6)
    asked.append({"custom_id": "bad", "params": {"model": "small", "messages": []}})
    created = client.messages.batches.create(requests=asked)  # type: ignore[arg-type]
    assert created.type == "message_batch" and created.processing_status == "in_progress"
    assert created.request_counts.processing == 7 and created.results_url is None
    ended = wait_ended(client, created.id)
    counts = ended.request_counts
    assert (counts.succeeded, counts.errored, counts.processing) == (6, 1, 0)
    assert ended.ended_at is not None and ended.results_url.endswith(f"{created.id}/results")
    results = {r.custom_id: r.result for r in client.messages.batches.results(created.id)}
    assert set(results) == {f"m-{i}" for i in range(6)} | {"bad"}
    message = results["m-0"]
    assert message.type == "succeeded" and message.message.type == "message"
    assert message.message.content[0].type == "text"
    bad = results["bad"]
    assert bad.type == "errored" and bad.error.error.type == "invalid_request_error"
    # Each line has its own trace: a root span of the batch, and the request's stages.
    roots = [
        span
        for span in EXPORTER.get_finished_spans()
        if span.kind == SpanKind.CONSUMER
        and (span.attributes or {}).get("tiergate.batch") == created.id
    ]
    assert len(roots) == 7
    assert {(r.attributes or {}).get("tiergate.priority") for r in roots} == {"batch"}
    generations = {
        span.parent.span_id
        for span in EXPORTER.get_finished_spans()
        if span.name == "generation" and span.parent is not None
    }
    assert sum(1 for r in roots if r.context.span_id in generations) == 6  # "bad" never ran
    listed = client.messages.batches.list(limit=10)
    assert created.id in [b.id for b in listed.data]
    deleted = client.messages.batches.delete(created.id)
    assert deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(created.id)


def test_cancel_marks_what_never_ran_canceled(gateway: RunningGateway) -> None:
    client = client_for(gateway)
    created = client.messages.batches.create(requests=requests(200, "c"))  # type: ignore[arg-type]
    cancelling = client.messages.batches.cancel(created.id)
    assert cancelling.processing_status in ("canceling", "ended")
    assert cancelling.cancel_initiated_at is not None
    ended = wait_ended(client, created.id)
    counts = ended.request_counts
    assert counts.canceled > 0 and counts.succeeded + counts.canceled == 200
    kinds = [r.result.type for r in client.messages.batches.results(created.id)]
    assert kinds.count("canceled") == counts.canceled and len(kinds) == 200


def test_errors_are_anthropics_and_batches_are_the_tenants_own(gateway: RunningGateway) -> None:
    client, other = client_for(gateway), client_for(gateway, OTHER_KEY)
    created = client.messages.batches.create(requests=requests(1, "own"))  # type: ignore[arg-type]
    with pytest.raises(anthropic.NotFoundError) as missing:
        other.messages.batches.retrieve(created.id)
    assert missing.value.body["type"] == "error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as repeated:
        client.messages.batches.create(requests=[*requests(1, "r"), *requests(1, "r")])  # type: ignore[list-item]
    assert "not unique" in repeated.value.message
    answer = httpx.get(
        gateway.base_url + f"/v1/batches/{created.id}",
        headers={"authorization": f"Bearer {TEST_KEY}"},
    )
    assert answer.status_code == 404 and "error" in answer.json()  # not an OpenAI batch
    wait_ended(client, created.id)
    running = client.messages.batches.create(requests=requests(100, "early"))  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError) as early:
        client.messages.batches.delete(running.id)  # not ended yet: refused
    assert "has not ended" in early.value.message
    client.messages.batches.cancel(running.id)
    wait_ended(client, running.id)


def test_params_nested_too_deep_refuse_the_batch_as_messages_would(
    gateway: RunningGateway,
) -> None:
    """A request whose params nest past what ``/v1/messages`` takes (64 levels; 300 is past
    what orjson writes) is Anthropic's 400, naming the request, and nothing is kept; 64
    levels of params are taken as ``/v1/messages`` takes them."""
    client = client_for(gateway)
    before = [b.id for b in client.messages.batches.list(limit=1000)]

    def body(levels: int) -> bytes:
        deep = b'{"a":' * (levels - 2) + b"1" + b"}" * (levels - 2)  # the 1 is ``levels`` deep
        fine = b'{"model":"small","max_tokens":16,"messages":[{"role":"user","content":"hi"}]'
        return (
            b'{"requests":[{"custom_id":"a","params":'
            + fine
            + b'}},{"custom_id":"b","params":'
            + fine
            + b',"x":'
            + deep
            + b"}}]}"
        )

    headers = {"x-api-key": TEST_KEY, "content-type": "application/json"}
    for levels in (300, 65):
        answer = httpx.post(
            gateway.base_url + "/v1/messages/batches", content=body(levels), headers=headers
        )
        assert answer.status_code == 400, answer.text
        error = answer.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert error["error"]["message"].startswith(
            "requests[1].params: JSON nested deeper than 64 levels"
        )
    assert [b.id for b in client.messages.batches.list(limit=1000)] == before
    answer = httpx.post(
        gateway.base_url + "/v1/messages/batches", content=body(64), headers=headers
    )
    assert answer.status_code == 200, answer.text
    ended = wait_ended(client, answer.json()["id"])
    assert ended.request_counts.succeeded + ended.request_counts.errored == 2
