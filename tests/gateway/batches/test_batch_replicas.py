"""Two ``python -m gateway serve`` replicas on one Redis share one batch; one is killed
with SIGKILL while it runs lines, and started again. The batch completes, every
``custom_id`` is in the output exactly once, the ledger charges each line once, and no
budget hold is left."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.batches.support import chat_line, jsonl, upload, wait_ended
from tests.gateway.budget_support import BudgetProbe, budget_config, redis_prefix
from tiergate_testing.configs import OTHER_KEY, TEST_KEY
from tiergate_testing.gateways import GatewayProcess, subprocess_env

pytestmark = pytest.mark.slow

LINES = 200


def running_lines(replica: GatewayProcess) -> float:
    for line in httpx.get(replica.base_url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("tiergate_batch_lines_running "):
            return float(line.split()[1])
    raise AssertionError("no tiergate_batch_lines_running gauge")


def test_a_replica_killed_mid_batch_loses_and_doubles_nothing(tmp_path: Path) -> None:
    with redis_prefix() as prefix:
        config = budget_config(prefix, token_delay_s=0.02, tokens=8)
        config["batches"] = {"concurrency": 6, "claim_idle_s": 2.0, "poll_s": 0.05, "sweep_s": 0.5}
        config["redis_timeout_s"] = 5.0  # two replicas and the test share two cores
        env = subprocess_env(
            TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_OTHER_KEY=OTHER_KEY, TIERGATE_LOG_LEVEL="warning"
        )
        replicas = [GatewayProcess(config, tmp_path, name=f"r{i}", env=env) for i in range(2)]
        try:
            for replica in replicas:
                replica.start()
            client = openai.OpenAI(base_url=replicas[0].api_url, api_key=TEST_KEY, max_retries=2)
            lines = [chat_line(f"k{i}", f"line {i}") for i in range(LINES)]
            batch = client.batches.create(
                input_file_id=upload(client, lines),
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            victim = replicas[1]
            deadline = time.monotonic() + 30
            while running_lines(victim) == 0:  # the victim holds lines when it dies
                assert time.monotonic() < deadline, "the second replica never took a line"
                time.sleep(0.05)
            progress = client.batches.retrieve(batch.id).request_counts
            assert progress is not None and progress.completed < LINES
            victim.kill()
            victim.start()
            survivor = openai.OpenAI(base_url=victim.api_url, api_key=TEST_KEY, max_retries=2)
            ended = wait_ended(survivor, batch.id, timeout_s=120)
            assert ended.status == "completed", ended
            assert ended.request_counts.completed == LINES
            output = jsonl(survivor, ended.output_file_id)
        finally:
            for replica in replicas:
                replica.stop()
        assert Counter(o["custom_id"] for o in output) == Counter(f"k{i}" for i in range(LINES))
        probe = BudgetProbe(prefix)
        events = [e for e in probe.events() if e.batch]
        charged = Counter(e.request_id for e in events)
        assert set(charged) == {o["response"]["request_id"] for o in output}
        assert set(charged.values()) == {1}  # each line charged once
        assert probe.wait_no_holds() == 0
