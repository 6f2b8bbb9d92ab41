"""What the batch tests share: a config with fast batch timings, input files, waiting for
a batch to end, and reading its output and error files back."""

from __future__ import annotations

import hashlib
import io
import time
from typing import Any

import openai
import orjson

from tiergate_testing.configs import fake_config

ADMIN_KEY = "tg-admin-key-for-batch-tests-00"
THRIFTY_KEY = "tg-thrifty-key-0123456789"
# Output tokens only, so a line's worst case (max_tokens 8) is exactly what it costs.
SMALL_OUTPUT_PRICE = 0.2  # USD per million tokens
LINE_COST = 8 * SMALL_OUTPUT_PRICE / 1e6 * 0.5  # at the batch price (half)
FAST = {"poll_s": 0.05, "sweep_s": 0.2, "claim_idle_s": 2.0, "retry_s": 0.05, "drain_s": 2.0}


def batch_config(**engine_options: Any) -> dict[str, Any]:
    config = fake_config(**{"tokens": 8, **engine_options})
    config["prices"]["fake-small"] = {"input": 0.0, "output": SMALL_OUTPUT_PRICE}
    config["batches"] = dict(FAST)
    config["admin"] = {"key_sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest()}
    digest = hashlib.sha256(THRIFTY_KEY.encode()).hexdigest()
    config["tenants"]["thrifty"] = {
        "keys": [{"id": "thrifty-1", "sha256": digest}],
        "budget": {"limit_usd": 30 * LINE_COST, "window": "total"},
    }
    return config


def chat_line(custom_id: str, text: str, url: str = "/v1/chat/completions") -> bytes:
    body = {"model": "small", "max_tokens": 8, "messages": [{"role": "user", "content": text}]}
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def upload(client: openai.OpenAI, lines: list[bytes]) -> str:
    data = io.BytesIO(b"\n".join(lines) + b"\n")
    return client.files.create(file=("input.jsonl", data), purpose="batch").id


def run_batch(
    client: openai.OpenAI, lines: list[bytes], endpoint: str = "/v1/chat/completions"
) -> Any:
    batch = client.batches.create(
        input_file_id=upload(client, lines),
        endpoint=endpoint,
        completion_window="24h",  # type: ignore[arg-type]
    )
    return wait_ended(client, batch.id)


def wait_ended(client: openai.OpenAI, batch_id: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"batch {batch_id} still {batch.status}"
        time.sleep(0.1)


def jsonl(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    text = client.files.content(file_id).content
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]
