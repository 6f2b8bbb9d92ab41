"""The guard off the serving core: embeddings inputs, MCP tool arguments and results,
batch input files (OpenAI's upload, Anthropic's inline requests). Then every Redis key
is read back: no planted value anywhere."""

from __future__ import annotations

import asyncio
import io
import os
import time
from collections.abc import Iterator

import anthropic
import openai
import orjson
import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.batches.support import FAST, jsonl, wait_ended
from tests.gateway.budget_support import redis_prefix
from tests.gateway.guardrails.guarded_support import (
    CARD,
    EMAIL,
    IBAN,
    KEY,
    SSN,
    Guarded,
    guarded_config,
)
from tests.gateway.mcp_support import call, mcp_client, stdio_server, text_of
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import running_gateway
from tiergate_testing.upstream import running_upstream

EMBED = "text-embedding-3-small"


@pytest.fixture(scope="module")
def guarded() -> Iterator[Guarded]:
    with redis_prefix() as prefix, running_upstream() as upstream:
        config = guarded_config(upstream, prefix)
        config["engines"]["embed"] = {
            "backend": "openai",
            "model": EMBED,
            "options": {"api_base": upstream.base_url, "upstream_model": "upstream-embed"},
        }
        config["embeddings"] = {EMBED: {"engine": "embed"}}
        config["prices"][EMBED] = {"input": 1.0, "output": 0}
        config["batches"] = dict(FAST)
        config["tenants"]["acme"]["mcp_tools"] = ["*"]
        config["mcp"] = {"servers": {"calc": stdio_server("calc", env={"UPSTREAM_TOKEN": KEY})}}
        with running_gateway(config) as gateway:
            yield Guarded(gateway, upstream, prefix)


def test_embeddings_inputs(guarded: Guarded) -> None:
    client = guarded.chat()
    since = len(guarded.bodies)
    client.embeddings.create(model=EMBED, input=[f"mail {EMAIL}", f"card {CARD}"])
    sent = orjson.dumps(guarded.bodies[since:]).decode()
    assert "<EMAIL_1>" in sent and "<CARD_1>" in sent
    assert EMAIL not in sent and CARD not in sent
    with pytest.raises(openai.BadRequestError) as blocked:
        client.embeddings.create(model=EMBED, input=f"IBAN {IBAN}")
    assert blocked.value.code == "guardrail_blocked"
    with pytest.raises(openai.BadRequestError) as local:  # the only embedder is remote
        client.embeddings.create(model=EMBED, input=f"SSN {SSN}")
    assert local.value.code == "guardrail_no_local_tier"
    with pytest.raises(openai.BadRequestError, match="token-id inputs"):
        client.embeddings.create(model=EMBED, input=[[1, 2, 3]])
    assert len(guarded.bodies) == since + 1


def test_mcp_arguments_and_results(guarded: Guarded) -> None:
    async def scenario() -> tuple[str, str, object]:
        async with mcp_client(guarded.gateway.base_url, TEST_KEY) as client:
            echoed = text_of(await call(client, "calc.echo", {"text": f"card {CARD}"}))
            who = text_of(await call(client, "calc.whoami"))
            blocked = await call(client, "calc.echo", {"text": f"IBAN {IBAN}"})
            return echoed, who, blocked

    echoed, who, blocked = asyncio.run(scenario())
    assert echoed == "card <CARD_1>"  # the upstream echoed what it got: the placeholder
    assert "env=<SECRET_1>" in who and KEY not in who  # a result is redacted too
    assert isinstance(blocked, MCPError) and "'iban' rule blocks" in str(blocked)


def test_batch_files_are_kept_redacted(guarded: Guarded) -> None:
    client = guarded.chat()
    since = len(guarded.bodies)
    lines = [
        orjson.dumps(
            {
                "custom_id": f"l{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "large", "messages": [{"role": "user", "content": text}]},
            }
        )
        for i, text in enumerate((f"mail {EMAIL}", f"card {CARD} and {EMAIL}"))
    ]
    data = io.BytesIO(b"\n".join(lines) + b"\n")
    file_id = client.files.create(file=("input.jsonl", data), purpose="batch").id
    kept = client.files.content(file_id).text
    assert EMAIL not in kept and CARD not in kept
    assert kept.count("<EMAIL_1>") == 2  # one placeholder per value, across the file
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    ended = wait_ended(client, batch.id)
    assert ended.status == "completed", ended
    assert len(jsonl(client, ended.output_file_id)) == 2
    with pytest.raises(openai.BadRequestError) as blocked:
        client.files.create(file=("x.jsonl", io.BytesIO(IBAN.encode())), purpose="batch")
    assert blocked.value.code == "guardrail_blocked"
    messages = guarded.messages()
    created = messages.messages.batches.create(
        requests=[
            {
                "custom_id": "m1",
                "params": {
                    "model": "large",
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": f"mail {EMAIL}"}],
                },
            }
        ]
    )
    deadline = time.monotonic() + 60
    while messages.messages.batches.retrieve(created.id).processing_status != "ended":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    sent = orjson.dumps(guarded.bodies[since:]).decode()
    assert len(guarded.bodies) - since == 3 and "<EMAIL_1>" in sent
    assert EMAIL not in sent and CARD not in sent


def test_nothing_unredacted_in_redis_after_every_surface(guarded: Guarded) -> None:
    kept = guarded.redis_text()
    assert guarded.prefix in kept and "<EMAIL_1>" in kept
    for value in (CARD, EMAIL, KEY, IBAN, SSN):
        assert value not in kept, value


def test_anthropic_batch_block_is_a_400(guarded: Guarded) -> None:
    with pytest.raises(anthropic.BadRequestError):
        guarded.messages().messages.batches.create(
            requests=[
                {
                    "custom_id": "m2",
                    "params": {
                        "model": "large",
                        "max_tokens": 8,
                        "messages": [{"role": "user", "content": IBAN}],
                    },
                }
            ]
        )
    assert os.environ.get("TIERGATE_TEST_KEY") == TEST_KEY
