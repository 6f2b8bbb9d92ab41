"""Prefix affinity: which replica already holds the KV cache for a prompt's beginning.

The rendered prompt is cut into fixed blocks; each block's key hashes the previous
key with the block (a chain, as vLLM's prefix cache and llm-d's scorer do), so a key
stands for the whole prefix up to that block. An LRU map remembers the replicas each
prefix was sent to. Turns of one conversation and prompts sharing a system prompt
then match on their common blocks and land where their cache is.

Replicas of one tier may run different backends with different chat templates, so
the pool hashes a canonical rendering (the tools, then role markers, content and the
calls an assistant made, in order): two requests share a canonical prefix exactly when
they share a templated one. Chat templates render the tool definitions ahead of the
conversation and an assistant's calls inside its turn, so two conversations that differ
only there share no cached prefix beyond that point, and neither do their keys.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from backends.base import GenerationRequest


def canonical_prompt(request: GenerationRequest) -> str:
    if request.prompt is not None:
        return request.prompt
    parts = []
    if request.tools:
        tools = orjson.dumps(list(request.tools), option=orjson.OPT_SORT_KEYS).decode()
        parts.append(f"<|tools|>\n{tools}\n")
    for message in request.messages or ():
        content = message.get("content")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        calls = "".join(_call(c) for c in message.get("tool_calls") or ())
        parts.append(f"<|{message.get('role', '')}|>\n{content or ''}{calls}\n")
    return "".join(parts)


def _call(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return ""
    return f"<|call|>{function.get('name', '')} {function.get('arguments', '')}"


def block_keys(text: str, block_chars: int) -> list[bytes]:
    """One chained key per *full* block; a partial tail block is never shared."""
    keys: list[bytes] = []
    previous = b""
    data = text.encode()
    for start in range(0, len(data) - block_chars + 1, block_chars):
        digest = hashlib.blake2b(previous, digest_size=16)
        digest.update(data[start : start + block_chars])
        previous = digest.digest()
        keys.append(previous)
    return keys


class PrefixIndex:
    """Bounded LRU: block key → replica names that were sent that prefix."""

    def __init__(self, max_blocks: int) -> None:
        self.max_blocks = max_blocks
        self._owners: OrderedDict[bytes, set[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def matched_blocks(self, keys: Sequence[bytes], replica: str) -> int:
        """How many leading blocks ``replica`` is known to hold."""
        matched = 0
        for key in keys:
            owners = self._owners.get(key)
            if owners is None or replica not in owners:
                break
            matched += 1
        return matched

    def record(self, keys: Sequence[bytes], replica: str) -> None:
        for key in keys:
            owners = self._owners.get(key)
            if owners is None:
                self._owners[key] = {replica}
            else:
                owners.add(replica)
                self._owners.move_to_end(key)
        while len(self._owners) > self.max_blocks:
            self._owners.popitem(last=False)

    def forget(self, replica: str) -> None:
        """A rebuilt replica starts with an empty cache."""
        for key in [k for k, owners in self._owners.items() if replica in owners]:
            owners = self._owners[key]
            owners.discard(replica)
            if not owners:
                del self._owners[key]
