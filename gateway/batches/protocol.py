"""The wire models of the batch APIs, as OpenAI's and Anthropic's SDKs send them
(``openai.types.batch_create_params``, ``anthropic.types.messages.batch_create_params``).

A batch line is one request to an endpoint the gateway serves; which endpoints a batch
may name, and what the line's id must look like, are here too.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from gateway.wire.common import Metadata

EMBEDDINGS_ENDPOINT = "/v1/embeddings"  # no wire format: ``ServingCore.embed`` runs it
# What a batch's lines may call (OpenAI's batch endpoints that the gateway serves).
OPENAI_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", EMBEDDINGS_ENDPOINT)
MESSAGES_ENDPOINT = "/v1/messages"  # every line of an Anthropic message batch
ANTHROPIC_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_CUSTOM_ID = 512


class ExpiresAfter(BaseModel):
    """``expires_after`` / ``output_expires_after``: seconds after creation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    anchor: Literal["created_at"]
    seconds: int = Field(ge=3600, le=2_592_000)


class CreateBatch(BaseModel):
    """``POST /v1/batches``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_file_id: str = Field(min_length=1, max_length=128)
    endpoint: str
    completion_window: Literal["24h"]
    metadata: Metadata | None = None
    output_expires_after: ExpiresAfter | None = None


class MessageBatchRequest(BaseModel):
    """One request of an Anthropic message batch: its id and a Messages body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    custom_id: str = Field(pattern=ANTHROPIC_CUSTOM_ID.pattern)
    params: dict[str, Any]


class CreateMessageBatch(BaseModel):
    """``POST /v1/messages/batches``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: list[MessageBatchRequest] = Field(min_length=1)


def input_of(raw: bytes) -> tuple[str, bytes]:
    """A stored line's custom id and request body."""
    line = orjson.loads(raw)
    return str(line["custom_id"]), orjson.dumps(line["body"])
