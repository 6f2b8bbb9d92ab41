"""Every OpenAI chat request field and what the gateway does with it (docs/openai-compat.md
is the table for readers; ``tests/gateway/chat/test_fields.py`` checks it per backend).

``core``: every backend honours it. A feature name (``tools``…): honoured by engines that
declare that capability, 400 naming the field elsewhere. ``passthrough``: only an engine
that forwards the request to an OpenAI-compatible server honours it (400 elsewhere); a
field not listed here is treated the same way. ``info``: accepted everywhere, it changes
no output (an end-user id for the operator's logs; ``metadata``, recorded on the
request's ledger event and trace, and sent to an engine only alongside ``store: true``).
``session``: honoured on every backend by the gateway itself, which routes one
conversation as one session, to the replica holding its prefix (``routers/session.py``,
``backends/pool.py``); forwarded as well by engines that forward, whose server keys its own
prompt cache on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CHAT_FIELDS: dict[str, str] = {
    "model": "core",
    "messages": "core",
    "stream": "core",
    "stream_options": "core",
    "n": "core",  # 1 only: larger values are a 400 naming n
    "stop": "core",
    "max_tokens": "core",
    "max_completion_tokens": "core",
    "temperature": "core",
    "top_p": "core",
    "seed": "core",
    "user": "info",
    "tools": "tools",
    "tool_choice": "tool_choice",
    "parallel_tool_calls": "parallel_tool_calls",
    "response_format": "response_format",
    "logprobs": "logprobs",
    "top_logprobs": "top_logprobs",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "logit_bias": "passthrough",
    "audio": "passthrough",
    "modalities": "passthrough",
    "prediction": "passthrough",
    "reasoning_effort": "passthrough",
    "verbosity": "passthrough",
    "service_tier": "passthrough",
    "store": "passthrough",
    "metadata": "info",  # bounded as OpenAI bounds it (gateway.wire.common.Metadata)
    "web_search_options": "passthrough",
    "prompt_cache_key": "session",
    "safety_identifier": "passthrough",
    "functions": "passthrough",
    "function_call": "passthrough",
}

# Values that ask for nothing beyond the default: accepted on every backend.
_DEFAULTS: dict[str, Any] = {"modalities": ["text"], "store": False, "service_tier": "auto"}


def passthrough_fields(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The request's fields beyond the ones the gateway models, minus those left unset or
    at OpenAI's default."""
    return {
        name: value
        for name, value in (extra or {}).items()
        if value is not None and value != _DEFAULTS.get(name, None) and value not in ({}, [])
    }


# ``POST /v1/embeddings``: the same kinds. ``passthrough`` fields (and any field not
# listed) are forwarded by remote engines and a 400 naming them on the in-process model.
EMBEDDING_FIELDS: dict[str, str] = {
    "model": "core",
    "input": "core",
    "encoding_format": "core",
    "user": "info",
    "dimensions": "passthrough",
}
