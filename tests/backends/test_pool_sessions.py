"""Prefix affinity for agent sessions: the pool keeps a conversation on the replica that
holds its prefix even when another gateway replica sent the last turn, and its keys see
the tools and calls a template renders."""

from __future__ import annotations

import uuid
from typing import Any

from backends.affinity import block_keys, canonical_prompt
from backends.base import GenerationRequest, SamplingParams
from backends.pool import EnginePool, StreamInfo
from tests.backends.test_pool import replicas

BLOCK = 256
TOOL = {"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}


def request(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        model="fake",
        sampling=SamplingParams(max_tokens=2),
        messages=tuple(messages),
        tools=tuple(tools) if tools else None,
    )


def agent(call_args: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": call_args}}
    return [
        {"role": "system", "content": "an agent " * 100},
        {"role": "user", "content": "the task " * 100},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "its output " * 100},
    ]


def test_the_keys_see_tools_and_calls_as_templates_render_them() -> None:
    plain = block_keys(canonical_prompt(request(agent("{}"))), BLOCK)
    with_tools = block_keys(canonical_prompt(request(agent("{}"), [TOOL])), BLOCK)
    other_call = block_keys(canonical_prompt(request(agent('{"cmd": "ls"}'))), BLOCK)
    assert with_tools[0] != plain[0]  # the tools come first: nothing is shared
    shared = next(i for i, (a, b) in enumerate(zip(plain, other_call, strict=False)) if a != b)
    assert 0 < shared < len(plain)  # shared up to the assistant's call, not beyond


async def test_a_session_replica_hint_wins_where_this_process_knows_nothing() -> None:
    turn = request(agent("{}"))
    blocks = len(block_keys(canonical_prompt(turn), BLOCK))

    async def served(held: tuple[str, int] | None) -> StreamInfo:
        info = StreamInfo()
        async for _ in EnginePool("small", replicas(3)).stream(turn, info, held=held):
            pass
        return info

    # this process never saw the conversation: the pick is by load, then round-robin
    assert (await served(None)).replica == "fake-0"
    # another gateway replica sent the last turn to fake-2: its prefix is there
    hinted = await served(("fake-2", blocks * BLOCK))
    assert hinted.replica == "fake-2" and hinted.matched_blocks == blocks
