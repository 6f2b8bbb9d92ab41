"""A batch through the real gateway (uvicorn, Redis, the official ``openai`` client) while
interactive clients keep every slot of the tier busy: the interactive requests are all
answered, batch lines wait or are preempted rather than failed, and once the load stops
the batch completes with every line answered and nothing left in flight."""

from __future__ import annotations

import math
import threading
import time

import httpx
import openai

from tests.gateway.batches.support import batch_config, chat_line, upload, wait_ended
from tests.gateway.budget_support import REDIS_URL, redis_prefix
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import running_gateway

SLOTS = 4
CLIENTS = 6  # more than the slots: the interactive queue is rarely empty
SHARE = 0.75
FLOOR = 3 * SLOTS / 0.08 / 2  # answers: half the slots' capacity for 3 s


def batch_inflight(base_url: str) -> float:
    """``tiergate_engine_batch_inflight`` of the small tier's replica, from ``/metrics``."""
    for line in httpx.get(base_url + "/metrics", timeout=5).text.splitlines():
        if line.startswith('tiergate_engine_batch_inflight{engine="fake-small'):
            return float(line.split()[-1])
    raise AssertionError("no tiergate_engine_batch_inflight for fake-small")


def test_a_batch_under_a_saturating_interactive_load_completes() -> None:
    with redis_prefix() as prefix:
        config = batch_config(token_delay_s=0.01, max_running=SLOTS)  # 80 ms a request
        config["redis_url"], config["redis_prefix"] = REDIS_URL, prefix
        config["engines"]["fake-small"]["max_inflight"] = SLOTS
        # A batch line that cannot get a slot for 0.5 s goes back to the runner (503),
        # which waits and asks again: it must not become an error line.
        pool_spec = {"wait_timeout_s": 0.5, "preempt_after_s": 0.01, "batch_share": SHARE}
        config["tiers"]["small"]["pool"] = pool_spec
        config["batches"]["concurrency"] = SLOTS
        with running_gateway(config) as gateway:
            client = openai.OpenAI(
                base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0
            )
            answered, failed = [], []
            pool = gateway.state.parts.pools["small"]
            done = threading.Event()

            def chat() -> None:
                while not done.is_set():
                    try:
                        client.chat.completions.create(
                            model="small", messages=[{"role": "user", "content": "hi"}]
                        )
                        answered.append(1)
                    except openai.APIError as exc:
                        failed.append(exc)

            clients = [threading.Thread(target=chat) for _ in range(CLIENTS)]
            for thread in clients:
                thread.start()
            lines = [chat_line(f"r{i}", f"question {i}") for i in range(12)]
            batch = client.batches.create(
                input_file_id=upload(client, lines),
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            # The load runs at least 3 s, and on until it has had half the slots' capacity
            # of those 3 s answered and held a batch line back: on a loaded host the test's
            # own clients are slower, which is no verdict on the pool (30 s: liveness).
            started = time.monotonic()
            seen = []  # batch lines in flight, while the load runs
            while not done.is_set():
                seen.append(batch_inflight(gateway.base_url))
                time.sleep(0.05)
                ran = time.monotonic() - started
                held_back = pool.counters.preempted + pool.counters.rejected > 0
                if ran > 30 or (ran >= 3.0 and len(answered) > FLOOR and held_back):
                    done.set()
            for thread in clients:
                thread.join()
            assert max(seen) <= math.ceil(SHARE * SLOTS), seen
            assert not failed, failed[:3]
            assert len(answered) > FLOOR
            ended = wait_ended(client, batch.id, timeout_s=60)
            assert ended.status == "completed"
            assert ended.request_counts is not None
            assert (ended.request_counts.completed, ended.request_counts.failed) == (12, 0)
            assert (pool.settings.preempt_after_s, pool.settings.batch_share) == (0.01, SHARE)
            replica = pool.replicas[0]
            assert (replica.inflight, replica.batch_inflight, pool.batch_waiting) == (0, 0, 0)
            # Lines were held back: preempted, or sent back to the runner after a wait.
            assert pool.counters.preempted + pool.counters.rejected > 0
