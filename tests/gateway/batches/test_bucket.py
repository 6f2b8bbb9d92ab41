"""Large batch files in an S3-compatible bucket: a real ``moto_server`` process (the
``moto[server]`` package, S3's protocol on loopback) behind ``batches.s3``. A file over
``store_max_bytes`` goes to the bucket and not to the store, reads back whole, feeds a
batch, and is deleted from the bucket with its record; one the tenant's limit refuses
leaves no object behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.gateway.batches.support import batch_config, chat_line, jsonl, upload, wait_ended
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.net import free_port, wait_http

BUCKET = "tiergate-batches"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def moto_server() -> str | None:
    """``moto_server`` next to this interpreter (the dev extra), on PATH, or named by
    ``TIERGATE_MOTO_SERVER`` (a venv of its own)."""
    beside = Path(sys.executable).with_name("moto_server")
    for candidate in (
        os.environ.get("TIERGATE_MOTO_SERVER"),
        str(beside),
        shutil.which("moto_server"),
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    binary = moto_server()
    if binary is None:
        pytest.skip("moto[server] is not installed (the dev extra has it)")
    port = free_port()
    server = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/", timeout_s=60)
        yield url
    finally:
        server.terminate()
        server.wait(10)


def bucket_keys(s3_url: str) -> list[str]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1", **_keys())
    listed = s3.list_objects_v2(Bucket=BUCKET)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }


@pytest.fixture(scope="module")
def gateway(s3_url: str) -> Iterator[RunningGateway]:
    import boto3

    boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1", **_keys()).create_bucket(
        Bucket=BUCKET
    )
    os.environ.update({"TIERGATE_S3_KEY": "testing", "TIERGATE_S3_SECRET": "testing"})
    config = batch_config()
    config["batches"].update(
        store_max_bytes=1024,
        limits={"file_bytes": 40_000},
        s3={
            "bucket": BUCKET,
            "endpoint_url": s3_url,
            "access_key_from_env": "TIERGATE_S3_KEY",
            "secret_key_from_env": "TIERGATE_S3_SECRET",
        },
    )
    with running_gateway(config) as running:
        yield running


def test_a_large_file_lives_in_the_bucket(gateway: RunningGateway, s3_url: str) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    lines = [chat_line(f"s{i}", f"a longer question number {i} " * 4) for i in range(40)]
    file_id = upload(client, lines)
    assert bucket_keys(s3_url) == [f"tiergate/files/acme/{file_id}"]
    store = gateway.state.parts.batches
    assert gateway.call(store.file_content("acme", file_id)) is None  # not in the store
    content = client.files.content(file_id).content
    assert content == b"\n".join(lines) + b"\n" and len(content) > 1024
    created = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    batch = wait_ended(client, created.id)
    assert batch.status == "completed"
    assert len(jsonl(client, batch.output_file_id)) == 40  # itself over 1 KiB: in the bucket
    kept = {f"tiergate/files/acme/{file_id}", f"tiergate/files/acme/{batch.output_file_id}"}
    assert set(bucket_keys(s3_url)) == kept
    # A file the tenant's limit refuses: its object is deleted again.
    with pytest.raises(openai.BadRequestError) as full:
        upload(client, [*lines, *lines])
    assert full.value.code == "storage_limit_exceeded"
    assert set(bucket_keys(s3_url)) == kept
    client.files.delete(file_id)
    client.files.delete(batch.output_file_id)
    assert bucket_keys(s3_url) == []
