"""Batches when Redis loses the queue: restarted empty (SIGKILL, no persistence), or the
queue's stream gone while the batch records survive (as an eviction or an older snapshot
leaves them). A real Redis we own, a real gateway (uvicorn) and the ``openai`` SDK.

Before: the runner remembered its consumer group for the life of the process; every read
answered ``NOGROUP`` and new batches stayed ``in_progress`` for ever."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis

from tests.gateway.batches.support import batch_config, chat_line, jsonl, run_batch, upload
from tests.redis_servers import RedisProcess
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway

PREFIX = "loss"
QUEUE = f"{PREFIX}:{{batches}}:lines"


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    process = RedisProcess("--maxmemory-policy", "noeviction")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def gateway(server: RedisProcess) -> Iterator[RunningGateway]:
    config = batch_config(token_delay_s=0.03)  # 8 tokens: about 0.25 s a line
    config["redis_url"], config["redis_prefix"] = server.url, PREFIX
    config["batches"]["concurrency"] = 2
    with running_gateway(config) as running:
        yield running


def client_for(gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def started(client: openai.OpenAI, lines: list[bytes]) -> Any:
    return client.batches.create(
        input_file_id=upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )


def wait_answered(client: openai.OpenAI, batch_id: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while client.batches.retrieve(batch_id).request_counts.completed < count:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_after_an_empty_restart_new_batches_run_and_old_ones_are_gone(
    server: RedisProcess, gateway: RunningGateway
) -> None:
    client = client_for(gateway)
    assert run_batch(client, [chat_line("warm", "hi")]).status == "completed"
    lost = started(client, [chat_line(f"l{i}", f"lost {i}") for i in range(20)])
    wait_answered(client, lost.id, 2)  # running when the store goes
    server.kill()
    server.start()  # the same port, nothing in it
    # The batch and its lines went with the store: a 404 like any unknown batch.
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve(lost.id)
    lines = [chat_line(f"n{i}", f"new {i}") for i in range(6)]
    batch = run_batch(client, lines)
    assert batch.status == "completed" and batch.request_counts.completed == 6
    ids = Counter(line["custom_id"] for line in jsonl(client, batch.output_file_id))
    assert ids == Counter({f"n{i}": 1 for i in range(6)})


def test_a_batch_whose_queue_was_lost_is_queued_again_and_answered_once(
    server: RedisProcess, gateway: RunningGateway
) -> None:
    client = client_for(gateway)
    batch = started(client, [chat_line(f"q{i}", f"queued {i}") for i in range(20)])
    wait_answered(client, batch.id, 2)
    admin = redis.Redis(port=server.port)
    assert admin.delete(QUEUE) == 1  # the queue's lines and group gone; the records stay
    deadline = time.monotonic() + 60
    while (current := client.batches.retrieve(batch.id)).status != "completed":
        assert time.monotonic() < deadline, f"still {current.status}: {current.request_counts}"
        time.sleep(0.1)
    assert current.request_counts.completed == 20 and current.request_counts.failed == 0
    ids = Counter(line["custom_id"] for line in jsonl(client, current.output_file_id))
    assert ids == Counter({f"q{i}": 1 for i in range(20)})
    assert int(admin.get(f"{QUEUE}:generation") or 0) > 1  # the group was made again
