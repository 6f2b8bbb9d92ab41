"""What makes two requests the same: the exact key and the semantic prefix.

The exact key covers everything that changes the output: tenant, requested model or
tier, every message, and every generation parameter the engine sees. The semantic
prefix covers the same minus the *text* of the last user message, plus a guard over
that text (its numbers and negations), because a sentence embedding barely moves
when "5 km" becomes "50 km" or "is" becomes "is not". The Redis key names are the
store's (``policies.stores.cache.keys``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from backends.base import GenerationRequest
from routers.embedding import last_user_text
from routers.verifier.guard import guard

VERSION = "2"  # bump when the key layout or the stored record changes


def embedding_space(name: str, dim: int) -> str:
    """A short tag of the embedder that made a vector: entries of one space are only ever
    compared with queries of the same space (its vector set, and the semantic prefix)."""
    return hashlib.sha256(f"{name}:{dim}".encode()).hexdigest()[:12]


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(_canonical([VERSION, *parts])).hexdigest()


def _params(request: GenerationRequest) -> dict[str, Any]:
    sampling = request.sampling
    return {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "stop": list(sampling.stop),
        "seed": sampling.seed,
        "tools": list(request.tools) if request.tools else None,
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
        "n": 1,
        # Options added later join the key only when set, so older keys stay valid.
        **{
            k: v
            for k, v in (
                ("frequency_penalty", sampling.frequency_penalty),
                ("presence_penalty", sampling.presence_penalty),
                ("parallel_tool_calls", request.parallel_tool_calls),
                ("passthrough", dict(request.passthrough) or None),
            )
            if v is not None
        },
    }


def _last_user_index(messages: tuple[Mapping[str, Any], ...]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def _without_text(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message with its text removed but everything else (images, name) kept."""
    stripped = dict(message)
    content = message.get("content")
    if isinstance(content, str) or content is None:
        stripped["content"] = None
    else:
        stripped["content"] = [p for p in content if p.get("type") != "text"]
    return stripped


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """One request's cache identity."""

    exact: str
    prefix: str  # everything but the compared text, plus its guard
    text: str  # the text compared by meaning (the last user message, or the prompt)


def fingerprint(
    tenant_ns: str, requested_model: str, request: GenerationRequest, space: str = ""
) -> Fingerprint:
    """``space``: the embedding space, part of the semantic prefix (not of the exact key:
    an exact hit does not depend on the embedder)."""
    params = _params(request)
    spaced = [space] if space else []
    if request.messages is not None:
        messages = tuple(request.messages)
        exact = _digest(tenant_ns, requested_model, "chat", list(messages), params)
        index = _last_user_index(messages)
        if index is None:
            return Fingerprint(exact, "", "")
        text = last_user_text(messages)
        rest = [*messages[:index], _without_text(messages[index]), *messages[index + 1 :]]
        prefix = _digest(tenant_ns, requested_model, "chat", rest, params, guard(text), *spaced)
        return Fingerprint(exact, prefix, text)
    prompt = request.prompt or ""
    exact = _digest(tenant_ns, requested_model, "text", prompt, params)
    prefix = _digest(tenant_ns, requested_model, "text", None, params, guard(prompt), *spaced)
    return Fingerprint(exact, prefix, prompt)
