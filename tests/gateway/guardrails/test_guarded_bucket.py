"""Batch files in an S3-compatible bucket (a real ``moto_server``) under guardrails: the
input file and the output file the batch writes are objects in the bucket, and reading
every object back finds none of the planted values."""

from __future__ import annotations

import os
from collections.abc import Iterator

import openai
import pytest

from tests.gateway.batches.support import batch_config, chat_line, jsonl, upload, wait_ended
from tests.gateway.batches.test_bucket import BUCKET, _keys, s3_url  # noqa: F401 (fixture)
from tests.gateway.guardrails.guarded_support import CARD, EMAIL, KEY
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway


def bucket_text(url: str) -> tuple[list[str], str]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_keys())
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    bodies = [s3.get_object(Bucket=BUCKET, Key=k)["Body"].read().decode() for k in keys]
    return keys, "\n".join(bodies)


@pytest.fixture(scope="module")
def gateway(s3_url: str) -> Iterator[RunningGateway]:  # noqa: F811
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
    config["tenants"]["acme"]["guardrails"] = {
        "detectors": {"email": "redact", "card": "redact", "secret": "redact"}
    }
    with running_gateway(config) as running:
        yield running


def test_no_bucket_object_holds_a_planted_value(gateway: RunningGateway, s3_url: str) -> None:  # noqa: F811
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    lines = [
        chat_line(f"s{i}", f"mail {EMAIL} about card {CARD}, key {KEY}, question {i}")
        for i in range(30)
    ]
    file_id = upload(client, lines)
    batch = wait_ended(
        client,
        client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
    )
    assert batch.status == "completed" and len(jsonl(client, batch.output_file_id)) == 30
    keys, text = bucket_text(s3_url)
    assert set(keys) == {
        f"tiergate/files/acme/{file_id}",
        f"tiergate/files/acme/{batch.output_file_id}",
    }  # both files are bucket objects (over store_max_bytes)
    assert text.count("<EMAIL_1>") == 30 and "<CARD_1>" in text and "<SECRET_1>" in text
    for value in (EMAIL, CARD, KEY, "4111111111111111"):
        assert value not in text
